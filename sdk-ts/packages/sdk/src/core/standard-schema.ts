// The Standard Schema v1 and Standard JSON Schema shapes the SDK accepts (§T4), declared
// structurally so no schema library is a dependency.

export interface StandardIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}

export type StandardResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<StandardIssue> };

/** Options the SDK passes to a Standard JSON Schema converter. */
export interface JsonSchemaConverterOptions {
  readonly target: "draft-2020-12";
}

export interface JsonSchemaConverter {
  input(options: JsonSchemaConverterOptions): unknown;
  output(options: JsonSchemaConverterOptions): unknown;
}

export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly "~standard": {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
    /** Standard JSON Schema: present on schemas that can export themselves (zod ≥ 4.2). */
    readonly jsonSchema?: JsonSchemaConverter;
  };
}

/** A plain JSON Schema object (draft 2020-12). */
export type JsonSchemaObject = Record<string, unknown>;

/** A JSON Schema carrying the handler's argument type for form 3 (`jsonSchema<T>()`). */
export type TypedJsonSchema<T> = JsonSchemaObject & { readonly "~appductType"?: T };

/** Form 2: a Standard Schema to validate plus the JSON Schema the descriptor carries. */
export interface SchemaPair<T> {
  schema: StandardSchemaV1<unknown, T>;
  jsonSchema: JsonSchemaObject | JsonSchemaConverter;
}

/** Any of the accepted schema forms (§T4). */
export type ToolSchema<T> = StandardSchemaV1<unknown, T> | SchemaPair<T> | TypedJsonSchema<T>;

/** Types the handler's `args` as `T` for a plain JSON Schema (form 3); returns its argument. */
export function jsonSchema<T>(schema: JsonSchemaObject): TypedJsonSchema<T> {
  return schema as TypedJsonSchema<T>;
}
