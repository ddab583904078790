// Browser device fields (§T7.3): the browser's name as `device_model`, the platform as
// `device_os`; no manufacturer.

import type { DeviceFields } from "../core/types.js";

interface NavigatorLike {
  userAgent?: string;
  platform?: string;
  userAgentData?: { brands?: { brand: string }[]; platform?: string };
}

function browserName(nav: NavigatorLike): string {
  const brands = (nav.userAgentData?.brands ?? []).map((b) => b.brand);
  if (brands.some((b) => /edge/i.test(b))) return "Edge";
  if (brands.some((b) => b === "Google Chrome" || b === "Chromium")) return "Chrome";
  const ua = nav.userAgent ?? "";
  if (/\bEdg(e|A|iOS)?\//.test(ua)) return "Edge";
  if (/\bFirefox\//.test(ua) || /\bFxiOS\//.test(ua)) return "Firefox";
  if (/\bChrome\//.test(ua) || /\bCriOS\//.test(ua)) return "Chrome";
  if (/\bSafari\//.test(ua)) return "Safari";
  return "Browser";
}

export function browserDevice(nav: NavigatorLike | undefined): DeviceFields {
  if (!nav) return {};
  const device: DeviceFields = { model: browserName(nav) };
  const os = nav.userAgentData?.platform || nav.platform;
  if (os) device.os = os;
  return device;
}
