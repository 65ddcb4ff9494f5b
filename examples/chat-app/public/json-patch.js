// RFC 6902 JSON Patch, the format of AG-UI's STATE_DELTA: the board panel applies each delta to
// the last STATE_SNAPSHOT. All six operations, on a copy, so a patch that fails leaves the
// state as it was (what AG-UI clients do: warn and keep the state).

/** Returns `document` with `operations` applied; throws (and changes nothing) if one fails. */
export function applyPatch(document, operations) {
  let root = structuredClone(document);
  for (const operation of operations) root = applyOperation(root, operation);
  return root;
}

function applyOperation(root, { op, path, from, value }) {
  const target = parsePointer(path);
  switch (op) {
    case "add":
      return put(root, target, structuredClone(value), "add");
    case "replace":
      return put(root, target, structuredClone(value), "replace");
    case "remove":
      return remove(root, target);
    case "move": {
      const moved = get(root, parsePointer(from));
      return put(remove(root, parsePointer(from)), target, moved, "add");
    }
    case "copy":
      return put(root, target, structuredClone(get(root, parsePointer(from))), "add");
    case "test":
      if (JSON.stringify(get(root, target)) !== JSON.stringify(value)) throw new Error(`test failed at ${path}`);
      return root;
    default:
      throw new Error(`unknown patch op ${op}`);
  }
}

// RFC 6901: "" is the whole document; "~1" is "/" and "~0" is "~" inside a token.
function parsePointer(pointer) {
  if (pointer === "") return [];
  if (typeof pointer !== "string" || !pointer.startsWith("/")) throw new Error(`bad JSON pointer ${pointer}`);
  return pointer.slice(1).split("/").map((token) => token.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function get(root, tokens) {
  let node = root;
  for (const token of tokens) {
    if (node === null || typeof node !== "object" || !Object.hasOwn(node, token)) {
      throw new Error(`no value at /${tokens.join("/")}`);
    }
    node = node[token];
  }
  return node;
}

function arrayIndex(array, token, allowEnd) {
  if (token === "-" && allowEnd) return array.length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) throw new Error(`bad array index ${token}`);
  const index = Number(token);
  if (index > array.length || (!allowEnd && index === array.length)) throw new Error(`array index ${token} out of range`);
  return index;
}

function put(root, tokens, value, mode) {
  if (tokens.length === 0) return value;
  const parent = get(root, tokens.slice(0, -1));
  const key = tokens[tokens.length - 1];
  if (Array.isArray(parent)) {
    const index = arrayIndex(parent, key, mode === "add");
    if (mode === "add") parent.splice(index, 0, value);
    else parent[index] = value;
  } else if (parent !== null && typeof parent === "object") {
    if (mode === "replace" && !Object.hasOwn(parent, key)) throw new Error(`no value to replace at /${tokens.join("/")}`);
    parent[key] = value;
  } else {
    throw new Error(`cannot add into a scalar at /${tokens.join("/")}`);
  }
  return root;
}

function remove(root, tokens) {
  if (tokens.length === 0) throw new Error("cannot remove the whole document");
  const parent = get(root, tokens.slice(0, -1));
  const key = tokens[tokens.length - 1];
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, key, false), 1);
  else if (parent !== null && typeof parent === "object" && Object.hasOwn(parent, key)) delete parent[key];
  else throw new Error(`no value to remove at /${tokens.join("/")}`);
  return root;
}
