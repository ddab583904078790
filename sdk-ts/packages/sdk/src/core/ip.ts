// IP address text forms for the bootstrap payload (§D4.3): dotted decimal for IPv4, RFC 5952
// canonical text for IPv6; and the app-side address allow-list (§D3.4).

/** Dotted-decimal text of 4 bytes. */
export function formatIpv4(bytes: Uint8Array): string {
  return Array.from(bytes.subarray(0, 4)).join(".");
}

/** RFC 5952 text of 16 bytes: lower case, no leading zeros, longest zero run (≥ 2) as `::`. */
export function formatIpv6(bytes: Uint8Array): string {
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) {
    groups.push(((bytes[i] as number) << 8) | (bytes[i + 1] as number));
  }
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    // The first of equally long runs wins (RFC 5952 §4.2.3).
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (g: number): string => g.toString(16);
  if (bestLen < 2) {
    return groups.map(hex).join(":");
  }
  const head = groups.slice(0, bestStart).map(hex).join(":");
  const tail = groups.slice(bestStart + bestLen).map(hex).join(":");
  return `${head}::${tail}`;
}

/** Parses strict dotted decimal (`a.b.c.d`, no leading zeros); `null` otherwise. */
export function parseIpv4(text: string): Uint8Array | null {
  const parts = text.split(".");
  if (parts.length !== 4) {
    return null;
  }
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i] as string;
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) {
      return null;
    }
    const n = Number(p);
    if (n > 255) {
      return null;
    }
    out[i] = n;
  }
  return out;
}

/** Parses IPv6 text (with `::` and an optional trailing dotted IPv4); `null` otherwise. */
export function parseIpv6(text: string): Uint8Array | null {
  if (text.length === 0 || text.length > 45) {
    return null;
  }
  const halves = text.split("::");
  if (halves.length > 2) {
    return null;
  }
  const parseSide = (side: string): number[] | null => {
    if (side === "") {
      return [];
    }
    const words: number[] = [];
    const pieces = side.split(":");
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i] as string;
      if (i === pieces.length - 1 && piece.includes(".")) {
        const v4 = parseIpv4(piece);
        if (!v4) return null;
        words.push(((v4[0] as number) << 8) | (v4[1] as number), ((v4[2] as number) << 8) | (v4[3] as number));
      } else if (/^[0-9A-Fa-f]{1,4}$/.test(piece)) {
        words.push(parseInt(piece, 16));
      } else {
        return null;
      }
    }
    return words;
  };
  const head = parseSide(halves[0] as string);
  const tail = halves.length === 2 ? parseSide(halves[1] as string) : [];
  if (!head || !tail) {
    return null;
  }
  let words: number[];
  if (halves.length === 2) {
    const missing = 8 - head.length - tail.length;
    if (missing < 1) return null;
    words = [...head, ...new Array<number>(missing).fill(0), ...tail];
  } else {
    words = head;
  }
  if (words.length !== 8) {
    return null;
  }
  const out = new Uint8Array(16);
  words.forEach((w, i) => {
    out[i * 2] = w >> 8;
    out[i * 2 + 1] = w & 255;
  });
  return out;
}

/** The IPv4 address inside an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`), else `null`. */
export function ipv4FromMapped(v6: Uint8Array): Uint8Array | null {
  for (let i = 0; i < 10; i++) {
    if (v6[i] !== 0) return null;
  }
  if (v6[10] !== 0xff || v6[11] !== 0xff) {
    return null;
  }
  return v6.slice(12, 16);
}

/**
 * The address allow-list of `allowPrivateLanOnly` (§D3.4): `10.0.0.0/8`, `172.16.0.0/12`,
 * `192.168.0.0/16`, or exactly `127.0.0.1`. IPv6 is never allowed.
 */
export function isPrivateLanAddress(address: string): boolean {
  const v4 = parseIpv4(address);
  if (!v4) {
    return false;
  }
  const [a, b, c, d] = v4 as unknown as [number, number, number, number];
  if (a === 10) return true;
  if (a === 172 && b >= 16 && b <= 31) return true;
  if (a === 192 && b === 168) return true;
  return a === 127 && b === 0 && c === 0 && d === 1;
}
