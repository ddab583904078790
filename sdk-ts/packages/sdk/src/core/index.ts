// @appduct/sdk: the platform-free core. No side effects, no transport (§T1.2).

export { createAppductClient, backoffDelayMs } from "./client.js";
export { createMemoryLeaseStore } from "./lease.js";
export {
  decodeBootstrapPayload,
  encodeBootstrapPayload,
  isBootstrapExpired,
  BootstrapEncodeError,
  type BootstrapPayload,
  type BootstrapPayloadInput,
} from "./bootstrap.js";
export { parseLink, hasAppductParameter, removeAppductFromFragment, isValidPin, type ParsedLink, type LinkParseResult, type LinkErrorCode } from "./link.js";
export {
  validateToolDescriptor,
  validateEventDescriptor,
  isValidToolName,
  isValidGroup,
  isValidEventName,
  type WireToolDescriptor,
  type WireEventDescriptor,
  type ToolAnnotations,
  type DescriptorVerdict,
} from "./descriptors.js";
export { isTerminalCloseCode } from "./close.js";
export { encodeFrame, fitsFrameLimit, type EncodedFrame } from "./frame.js";
export { image, text, resourceLink, toolContent } from "./content.js";
export { MAX_FRAME_BYTES, utf8ByteLength, truncateUtf16 } from "./text.js";
export { isPrivateLanAddress } from "./ip.js";
export {
  AppductRegistrationError,
  AppductToolError,
  AppductConnectError,
  AppductDisabledError,
  TOOL_ERROR_TYPES,
  type ToolErrorType,
  type AppductConnectErrorCode,
} from "./errors.js";
export {
  jsonSchema,
  type StandardSchemaV1,
  type StandardIssue,
  type StandardResult,
  type JsonSchemaConverter,
  type JsonSchemaConverterOptions,
  type JsonSchemaObject,
  type TypedJsonSchema,
  type SchemaPair,
  type ToolSchema,
} from "./standard-schema.js";
export type * from "./types.js";
