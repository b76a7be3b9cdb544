// node validate_schema.js FILE: validates every object of a multi-document YAML file against the
// OpenAPI schemas shipped in kubernetes-models (the core API) and @kubernetes-models/cert-manager
// (cert-manager.io CRDs); an object of a kind it has no schema for is a problem too. Prints one
// line per object and exits 1 on any problem. NODE_PATH names the node_modules that hold them
// (tools/install-deps puts them under /opt/shoal/k8s-models).
"use strict";
const fs = require("fs");
const yaml = require("js-yaml");
const groups = {
  "v1": require("kubernetes-models/v1"),
  "apps/v1": require("kubernetes-models/apps/v1"),
  "cert-manager.io/v1": require("@kubernetes-models/cert-manager/cert-manager.io/v1"),
};
let problems = 0;
let objects = 0;
for (const doc of yaml.loadAll(fs.readFileSync(process.argv[2], "utf8"))) {
  if (!doc) continue;
  objects++;
  const where = `${doc.apiVersion} ${doc.kind} ${doc.metadata && doc.metadata.name}`;
  const model = groups[doc.apiVersion] && groups[doc.apiVersion][doc.kind];
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
}
console.log(`${objects} objects, ${problems} problem(s)`);
process.exit(problems ? 1 : 0);
