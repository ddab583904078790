// The inert client (§T8): every function does no work; connect() rejects.

import { AppductDisabledError } from "../core/errors.js";
import type { AppductClient, Registration } from "../core/types.js";

const noRegistration = (name?: string): Registration => (name === undefined ? { remove: () => undefined } : { name, remove: () => undefined });
let warned = false;

/** A client that does nothing: registrations are not validated, connect() rejects. */
export const inertClient: AppductClient = {
  registerTool: (def) => noRegistration(typeof def?.name === "string" ? def.name : undefined),
  createToolGroup: (group) => ({ group, registerTool: (def) => noRegistration(typeof def?.name === "string" ? def.name : undefined) }),
  registerEvent: (def) => noRegistration(typeof def?.name === "string" ? def.name : undefined),
  postEvent: () => undefined,
  connect: () => {
    if (!warned) {
      warned = true;
      console.warn("appduct: this build uses the inert entry; connect() does nothing.");
    }
    return Promise.reject(new AppductDisabledError());
  },
  disconnect: () => Promise.resolve(),
  handleUrl: () => false,
  restoreSession: () => Promise.resolve(false),
  getAppductState: () => "idle",
  getSessionId: () => null,
  getSessionAlias: () => null,
  getRegisteredTools: () => [],
  addAppductListener: () => noRegistration(),
  configureAppduct: () => undefined,
  connectBootstrap: () => Promise.reject(new AppductDisabledError()),
  setForeground: () => undefined,
  registrySnapshot: () => ({ tools: [], events: [] }),
};
