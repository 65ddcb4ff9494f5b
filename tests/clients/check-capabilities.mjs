// Judges agents' capabilities with the official schema: `node check-capabilities.mjs <file>`
// reads `[{"name": …, "capabilities": …}]` and fails unless each parses as @ag-ui/core 1.0's
// AgentCapabilities and every key in it is one of the vocabulary's (the schema itself lets
// unknown keys through; `custom` is open by design).
import { readFileSync } from "node:fs";
import { AgentCapabilitiesSchema } from "@ag-ui/core/schemas";

/// The keys of `value` (at `path`) that `schema` does not name, at every depth.
function unknownKeys(schema, value, path) {
  while (schema?._def?.innerType) schema = schema._def.innerType; // optional, nullable, default
  if (schema?._def?.type === "array" && Array.isArray(value)) {
    return value.flatMap((item, i) => unknownKeys(schema._def.element, item, `${path}[${i}]`));
  }
  if (schema?._def?.type !== "object" || value === null || typeof value !== "object") return [];
  // A record-like object (`custom`, `metadata`, a tool's `parameters`) takes any key.
  if (Object.keys(schema.shape).length === 0) return [];
  const shape = schema.shape;
  return Object.entries(value).flatMap(([key, inner]) => {
    if (!(key in shape)) return [`${path}.${key}`];
    return unknownKeys(shape[key], inner, `${path}.${key}`);
  });
}

const agents = JSON.parse(readFileSync(process.argv[2], "utf8"));
let failed = false;
for (const { name, capabilities } of agents) {
  const parsed = AgentCapabilitiesSchema.safeParse(capabilities);
  const unknown = parsed.success ? unknownKeys(AgentCapabilitiesSchema, capabilities, "capabilities") : [];
  if (!parsed.success) {
    console.log(`${name}: not AgentCapabilities: ${parsed.error.message}`);
  } else if (unknown.length > 0) {
    console.log(`${name}: keys outside the vocabulary: ${unknown.join(", ")}`);
  } else {
    console.log(`${name}: ok`);
    continue;
  }
  failed = true;
}
process.exit(failed ? 1 : 0);
