// `@appduct/sdk/react-native/auto` as the Metro helper resolves it in included builds
// (§T11.4): the flag first, then the real auto entry.

import "./enable-flag.js";
import "./auto.js";
