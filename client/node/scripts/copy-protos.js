// `npm pack` / `npm publish`: copies the repository's proto/ files the client loads into the
// package, which then needs nothing outside itself.
import { cpSync, mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

const from = fileURLToPath(new URL("../../../proto/tenure/v1", import.meta.url));
const to = fileURLToPath(new URL("../proto/tenure/v1", import.meta.url));
mkdirSync(to, { recursive: true });
for (const file of ["leases.proto", "cluster.proto"]) cpSync(`${from}/${file}`, `${to}/${file}`);
