// React Native device fields (§T7.3), from `Platform`. The core cuts each to 256 UTF-16 code
// units and omits empty ones.

import type { DeviceFields } from "../core/types.js";

export interface PlatformLike {
  OS: string;
  Version: string | number;
  isPad?: boolean;
  constants?: { Manufacturer?: unknown; Model?: unknown };
}

const text = (value: unknown): string | undefined => (typeof value === "string" && value !== "" ? value : undefined);

export function reactNativeDevice(platform: PlatformLike): DeviceFields {
  const version = String(platform.Version ?? "");
  const device: DeviceFields = {};
  if (platform.OS === "android") {
    const manufacturer = text(platform.constants?.Manufacturer);
    const model = text(platform.constants?.Model);
    if (manufacturer !== undefined) device.manufacturer = manufacturer;
    if (model !== undefined) device.model = model;
    device.os = `Android ${version}`.trim();
  } else if (platform.OS === "ios") {
    device.manufacturer = "Apple";
    device.model = platform.isPad ? "iPad" : "iPhone";
    device.os = `iOS ${version}`.trim();
  } else {
    // Other React Native targets (macOS, Windows, web) are not specified; report the platform.
    device.os = `${platform.OS} ${version}`.trim();
  }
  return device;
}
