// k8s_validate.js MODULES_DIR FILE.yaml - validate every object of a
// multi-document YAML file against the Kubernetes OpenAPI schema, offline,
// with npm's kubernetes-models (installed under MODULES_DIR by tests/deps.sh).
// A Kubeflow PaddleJob (no schema there) is checked replica by replica as
// PodTemplates. Prints "ok KIND NAME" per object; exits 1 on the first error.
const path = require('path');
const dir = path.resolve(process.argv[2], 'node_modules');
const YAML = require(path.join(dir, 'yaml'));
const fs = require('fs');
const models = {
  'v1': require(path.join(dir, 'kubernetes-models/v1')),
  'apps/v1': require(path.join(dir, 'kubernetes-models/apps/v1')),
  'batch/v1': require(path.join(dir, 'kubernetes-models/batch/v1')),
};
function check(apiVersion, kind, obj) {
  const group = models[apiVersion];
  if (!group || !group[kind]) throw new Error(`no schema for ${apiVersion} ${kind}`);
  new group[kind](obj).validate();
}
let n = 0;
for (const doc of YAML.parseAllDocuments(fs.readFileSync(process.argv[3], 'utf8'))) {
  if (doc.errors.length) { console.error(`YAML: ${doc.errors[0].message}`); process.exit(1); }
  const obj = doc.toJS();
  if (!obj) continue;
  try {
    if (obj.kind === 'PaddleJob') {
      for (const [role, spec] of Object.entries(obj.spec.paddleReplicaSpecs)) {
        if (!Number.isInteger(spec.replicas)) throw new Error(`${role}.replicas is not an integer`);
        check('v1', 'PodTemplate', { apiVersion: 'v1', kind: 'PodTemplate',
                                    metadata: { name: `${obj.metadata.name}-${role.toLowerCase()}` },
                                    template: spec.template });
      }
    } else {
      check(obj.apiVersion, obj.kind, obj);
    }
  } catch (e) {
    console.error(`${obj.kind} ${obj.metadata && obj.metadata.name}: ${e.message.split('\n')[0]}`);
    process.exit(1);
  }
  console.log(`ok ${obj.kind} ${obj.metadata.name}`);
  n++;
}
if (n === 0) { console.error('no objects'); process.exit(1); }
