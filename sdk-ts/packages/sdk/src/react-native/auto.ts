// @appduct/sdk/react-native/auto (§T11.3): the only entry with side effects. Importing it
// installs, once, the Linking `url` listener, resumes a held lease, handles the launch URL, and
// follows AppState, for the client of `@appduct/sdk/react-native`. Nothing when that is inert.

import { AppState, Linking } from "react-native";

import { inertClient } from "../inert/client.js";
import { appductClient } from "./index.js";
import { installAutoLifecycle } from "./lifecycle.js";

if (appductClient !== inertClient) installAutoLifecycle(appductClient, { Linking, AppState });
