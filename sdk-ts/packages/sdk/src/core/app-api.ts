// The app-side functions every platform entry exports, bound to that entry's client (§T2).
// Type-only imports: the inert entry uses this without pulling in the session core.

import type { WireToolDescriptor } from "./descriptors.js";
import type {
  AppductClient,
  AppductListeners,
  ClientState,
  ConfigureOptions,
  ConnectOptions,
  EventDefinition,
  Registration,
  ToolDefinition,
  ToolGroup,
} from "./types.js";

export interface AppApi {
  registerTool<I = unknown, O = unknown>(def: ToolDefinition<I, O>): Registration;
  createToolGroup(group: string): ToolGroup;
  registerEvent<P = unknown>(def: EventDefinition<P>): Registration;
  postEvent(name: string, payload?: unknown): void;
  connect(link: string, options?: ConnectOptions): Promise<void>;
  disconnect(): Promise<void>;
  handleUrl(url: string): boolean;
  restoreSession(): Promise<boolean>;
  getAppductState(): ClientState;
  getSessionId(): string | null;
  getSessionAlias(): string | null;
  getRegisteredTools(): WireToolDescriptor[];
  addAppductListener<K extends keyof AppductListeners>(kind: K, cb: AppductListeners[K]): Registration;
  configureAppduct(options: ConfigureOptions): void;
  appductClient: AppductClient;
}

/** The entry functions, each calling `client`. */
export function bindAppApi(client: AppductClient): AppApi {
  return {
    registerTool: (def) => client.registerTool(def),
    createToolGroup: (group) => client.createToolGroup(group),
    registerEvent: (def) => client.registerEvent(def),
    postEvent: (name, payload) => client.postEvent(name, payload),
    connect: (link, options) => client.connect(link, options),
    disconnect: () => client.disconnect(),
    handleUrl: (url) => client.handleUrl(url),
    restoreSession: () => client.restoreSession(),
    getAppductState: () => client.getAppductState(),
    getSessionId: () => client.getSessionId(),
    getSessionAlias: () => client.getSessionAlias(),
    getRegisteredTools: () => client.getRegisteredTools(),
    addAppductListener: (kind, cb) => client.addAppductListener(kind, cb),
    configureAppduct: (options) => client.configureAppduct(options),
    appductClient: client,
  };
}
