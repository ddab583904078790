// The SDK version: the package's, which follows the appduct binary's (§T1.1; tested).
export const SDK_VERSION = "0.1.0";
