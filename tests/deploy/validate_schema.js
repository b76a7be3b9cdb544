// node validate_schema.js FILE: validates every object of a multi-document YAML file two ways.
//
// 1. Against the OpenAPI schemas shipped in kubernetes-models (the core API),
//    @kubernetes-models/cert-manager (cert-manager.io CRDs) and
//    @kubernetes-models/prometheus-operator (monitoring.coreos.com CRDs): types, required fields,
//    formats. Those validators accept fields the schema does not know.
// 2. Against the same packages' TypeScript interfaces (IDaemonSet, IServiceMonitor, ...), with the
//    TypeScript compiler: every object becomes an object literal of its kind's type, and
//    TypeScript's excess-property check refuses any field the type does not declare, at every
//    depth. A misspelt `jobLable:` or `hostNetwrok:` fails here (tests/deploy/render_test.py proves
//    it on purpose).
//
// An object of a kind it has no schema for is a problem too. Prints one line per object (and per
// type error) and exits 1 on any problem. NODE_PATH names the node_modules that hold the packages
// (tools/install-deps puts them under /opt/shoal/k8s-models).
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const yaml = require("js-yaml");
const ts = require("typescript");

// apiVersion -> [module path, model module for step 1]
const groups = {
  "v1": "kubernetes-models/v1",
  "apps/v1": "kubernetes-models/apps/v1",
  "batch/v1": "kubernetes-models/batch/v1",
  "policy/v1": "kubernetes-models/policy/v1",
  "networking.k8s.io/v1": "kubernetes-models/networking.k8s.io/v1",
  "rbac.authorization.k8s.io/v1": "kubernetes-models/rbac.authorization.k8s.io/v1",
  "cert-manager.io/v1": "@kubernetes-models/cert-manager/cert-manager.io/v1",
  "monitoring.coreos.com/v1": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1",
};

let problems = 0;
const docs = [];
for (const doc of yaml.loadAll(fs.readFileSync(process.argv[2], "utf8"))) {
  if (!doc) continue;
  const where = `${doc.apiVersion} ${doc.kind} ${doc.metadata && doc.metadata.name}`;
  const mod = groups[doc.apiVersion];
  const model = mod && require(mod)[doc.kind];
  if (!model) {
    console.log(`no schema: ${where}`);
    problems++;
    continue;
  }
  try {
    new model(doc).validate();
    console.log(`valid: ${where}`);
  } catch (e) {
    console.log(`invalid: ${where}: ${e.message}`);
    problems++;
  }
  docs.push({doc, where, mod});
}

// Step 2: one TypeScript file, one typed constant per object; line numbers map errors back.
const nodePath = (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean)[0];
if (!nodePath) {
  console.log("NODE_PATH is not set: cannot find the packages' type declarations");
  process.exit(1);
}
const lines = [];
const owner = [];  // line -> object description
docs.forEach(({doc, where, mod}, i) => {
  lines.push(`import type { I${doc.kind} as T${i} } from "${mod}/${doc.kind}";`);
  owner.push(where);
});
docs.forEach(({doc, where}, i) => {
  const body = JSON.stringify(doc, null, 1).split("\n");
  body[0] = `export const o${i}: T${i} = ` + body[0];
  body[body.length - 1] += ";";
  for (const l of body) {
    lines.push(l);
    owner.push(where);
  }
});
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "shoal-k8s-typecheck-"));
const file = path.join(dir, "objects.ts");
fs.writeFileSync(file, lines.join("\n") + "\n");
const program = ts.createProgram([file], {
  noEmit: true, strict: true, skipLibCheck: true, types: [],
  module: ts.ModuleKind.CommonJS, moduleResolution: ts.ModuleResolutionKind.Node10,
  baseUrl: nodePath, paths: {"*": [path.join(nodePath, "*")]},
});
const diags = ts.getPreEmitDiagnostics(program);
for (const d of diags) {
  const msg = ts.flattenDiagnosticMessageText(d.messageText, "\n  ");
  if (d.file && d.file.fileName === file && d.start !== undefined) {
    const {line} = d.file.getLineAndCharacterOfPosition(d.start);
    console.log(`type error: ${owner[line]}: ${lines[line].trim()}\n  ${msg}`);
  } else {
    console.log(`type error: ${msg}`);
  }
  problems++;
}
fs.rmSync(dir, {recursive: true, force: true});
console.log(`${docs.length} objects, ${problems} problem(s)`);
process.exit(problems ? 1 : 0);
