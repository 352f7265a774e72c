// SPDX-License-Identifier: Apache-2.0
// deploy/kubernetes checked offline against the Kubernetes API schema:
// every object by kubernetes-models (the API's OpenAPI schema compiled:
// types, required fields, formats), and unknown fields refused by
// TypeScript's excess-property check against the same models' types (the
// schema itself allows unknown fields). Kustomizations are checked for
// their keys and that what they name exists; patches as partial objects of
// their kind. Then what the DaemonSet must be (hostNetwork, its
// capabilities, pins on the host's bpffs mounted by an init container,
// maxUnavailable 1, the readiness probe, the policy rendered by node name)
// is asserted.
//
//   node validate.mjs DEPLOY_DIR WORK_DIR     (WORK_DIR has node_modules)
//   node validate.mjs --self-test WORK_DIR    (a mistake of each kind is refused)
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";

const [, , first, work] = process.argv;
const selfTest = first === "--self-test";
const errors = [];
const fail = (where, msg) => errors.push(`${where}: ${msg}`);

const kustomizationKeys = new Set([
  "apiVersion", "kind", "namespace", "labels", "resources", "patches", "configMapGenerator",
  "images", "nameSuffix", "namePrefix", "generatorOptions",
]);

// kubernetes-models/<group>/<version>/<Kind> for an apiVersion and kind.
function modelPath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  return `kubernetes-models/${group ? `${group}/${version}` : version}/${kind}`;
}

// Documents of a file: {file, index, doc}; patches are partial objects.
function documents(file, text) {
  return YAML.parseAllDocuments(text).map((d, index) => {
    if (d.errors.length) fail(`${file}#${index}`, `YAML: ${d.errors[0].message}`);
    return { file, index, doc: d.toJS() };
  });
}

function checkKustomization(file, k, patches) {
  const dir = path.dirname(file);
  for (const key of Object.keys(k))
    if (!kustomizationKeys.has(key)) fail(file, `unknown Kustomization key "${key}"`);
  for (const r of k.resources ?? []) {
    const p = path.join(dir, r);
    if (!fs.existsSync(p)) fail(file, `resource ${r} does not exist`);
    else if (fs.statSync(p).isDirectory() && !fs.existsSync(path.join(p, "kustomization.yaml")))
      fail(file, `resource ${r} is a directory without a kustomization.yaml`);
  }
  for (const p of k.patches ?? []) {
    const pf = path.join(dir, p.path ?? "");
    if (!p.path || !fs.existsSync(pf)) fail(file, `patch ${p.path} does not exist`);
    else patches.add(path.resolve(pf));
  }
  for (const g of k.configMapGenerator ?? [])
    for (const f of g.files ?? [])
      if (!fs.existsSync(path.join(dir, f))) fail(file, `configMapGenerator file ${f} does not exist`);
  for (const i of k.images ?? [])
    for (const key of Object.keys(i))
      if (!["name", "newName", "newTag", "digest"].includes(key))
        fail(file, `unknown key "${key}" in images`);
}

async function validate(files) {
  const patches = new Set();
  const docs = [];
  for (const [file, text] of files) {
    for (const d of documents(file, text)) {
      if (d.doc?.kind === "Kustomization") checkKustomization(file, d.doc, patches);
      else docs.push(d);
    }
  }
  // schema validation, and the TypeScript file of the excess-property check
  let ts = "type DeepPartial<T> = { [K in keyof T]?: NonNullable<T[K]> extends (infer U)[] ? " +
    "DeepPartial<U>[] : NonNullable<T[K]> extends object ? DeepPartial<NonNullable<T[K]>> : T[K] };\n";
  const lines = [];
  for (const [n, d] of docs.entries()) {
    const where = `${d.file}#${d.index}`;
    const { apiVersion, kind } = d.doc ?? {};
    if (!apiVersion || !kind) {
      fail(where, "no apiVersion and kind");
      continue;
    }
    const mod = modelPath(apiVersion, kind);
    let Model;
    try {
      Model = (await import(mod))[kind];
    } catch {
      fail(where, `${apiVersion} ${kind} is not a Kubernetes API kind`);
      continue;
    }
    const patch = patches.has(path.resolve(d.file));
    if (!patch) {
      try {
        new Model(d.doc).validate();
      } catch (e) {
        fail(where, `${kind} ${d.doc.metadata?.name}: ${e.message}`);
      }
    }
    ts += `import type { I${kind} as T${n} } from "${mod}";\n`;
    lines.push([`export const d${n}: ${patch ? `DeepPartial<T${n}>` : `T${n}`} = ${JSON.stringify(d.doc)};`, where]);
  }
  const header = ts.split("\n").length - 1;
  ts += lines.map((l) => l[0]).join("\n") + "\n";
  const tsFile = path.join(work, `check-${process.pid}.ts`);
  fs.writeFileSync(tsFile, ts);
  try {
    execFileSync(process.execPath, [path.join(work, "node_modules/typescript/bin/tsc"), "--noEmit",
      "--strict", "--skipLibCheck", "--module", "esnext", "--moduleResolution", "bundler",
      "--target", "es2022", tsFile], { cwd: work, encoding: "utf8" });
  } catch (e) {
    for (const m of `${e.stdout}`.matchAll(/\.ts\((\d+),\d+\): error TS\d+: (.*)/g)) {
      const where = lines[Number(m[1]) - header - 1]?.[1] ?? "typescript";
      fail(where, m[2].replace("Object literal may only specify known properties, and ",
        "unknown field: "));
    }
    if (!`${e.stdout}`.includes("error TS")) fail("typescript", `${e.stdout}${e.stderr}`);
  } finally {
    fs.rmSync(tsFile, { force: true });
  }
  return docs;
}

// What the DaemonSet must be, beyond the schema.
function checkDaemonSet(docs) {
  const ds = docs.find((d) => d.doc.kind === "DaemonSet" && d.doc.spec?.template?.spec?.containers);
  if (!ds) return fail("deploy/kubernetes", "no DaemonSet");
  const where = `${ds.file}`;
  const spec = ds.doc.spec, pod = spec.template.spec;
  const main = pod.containers.find((c) => c.name === "dualpathd");
  const init = (pod.initContainers ?? []).find((c) => c.name === "render-policy");
  const expect = (ok, msg) => ok || fail(where, msg);
  expect(pod.hostNetwork === true, "the pod must be on the host network");
  expect(spec.updateStrategy?.rollingUpdate?.maxUnavailable === 1, "maxUnavailable must be 1");
  expect(main, "no dualpathd container");
  if (!main) return;
  const caps = main.securityContext?.capabilities ?? {};
  expect(JSON.stringify([...(caps.add ?? [])].sort()) ===
    JSON.stringify(["DAC_OVERRIDE", "NET_ADMIN", "SYS_ADMIN"]),
    "capabilities must be NET_ADMIN SYS_ADMIN DAC_OVERRIDE (SYS_ADMIN covers BPF and PERFMON)");
  expect((caps.drop ?? []).includes("ALL"), "every other capability must be dropped");
  expect(!main.securityContext?.privileged, "the daemon must not be privileged");
  const mounts = Object.fromEntries((main.volumeMounts ?? []).map((m) => [m.mountPath, m.name]));
  const host = Object.fromEntries((pod.volumes ?? []).filter((v) => v.hostPath).map((v) => [v.name, v.hostPath.path]));
  for (const p of ["/sys/fs/bpf", "/sys/fs/cgroup", "/run/dualpath"])
    expect(host[mounts[p]] === p, `${p} must be the host's (hostPath)`);
  expect(main.readinessProbe?.exec?.command?.join(" ").includes("status --ready"),
    "the readiness probe must be dpctl status --ready");
  expect(init?.command?.join(" ").includes("policy render") &&
    init?.env?.some((e) => e.name === "NODE_NAME" && e.valueFrom?.fieldRef?.fieldPath === "spec.nodeName"),
    "the policy must be rendered by the node's name (spec.nodeName)");
  expect(!(main.lifecycle?.preStop), "no preStop: a stopped pod keeps the datapath pinned");
  const bpffs = (pod.initContainers ?? []).find((c) => c.name === "mount-bpffs");
  expect(bpffs?.volumeMounts?.some((m) => m.mountPath === "/sys/fs/bpf" &&
    m.mountPropagation === "Bidirectional" && host[m.name] === "/sys/fs/bpf") &&
    bpffs?.securityContext?.privileged === true &&
    (pod.initContainers ?? [])[0]?.name === "mount-bpffs",
    "the first init container must be mount-bpffs: the host's /sys/fs/bpf, Bidirectional (privileged)");
}

function readTree(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...readTree(p));
    else if (e.name.endsWith(".yaml")) out.push([p, fs.readFileSync(p, "utf8")]);
  }
  return out.sort();
}

if (selfTest) {
  // each mistake alone must be refused, or the check could not fail
  const good = {
    apiVersion: "apps/v1", kind: "DaemonSet", metadata: { name: "x" },
    spec: { selector: { matchLabels: { a: "b" } }, template: { metadata: { labels: { a: "b" } },
      spec: { containers: [{ name: "c", image: "i" }] } } },
  };
  const cases = {
    "unknown field": (d) => { d.spec.template.spec.hostNetwrk = true; },
    "unknown nested field": (d) => { d.spec.template.spec.containers[0].securityContext = { privleged: true }; },
    "wrong type": (d) => { d.spec.template.spec.hostNetwork = "yes"; },
    "missing required field": (d) => { delete d.spec.selector; },
    "unknown kind": (d) => { d.kind = "DeamonSet"; },
  };
  let bad = 0;
  const base = await validate([["good.yaml", YAML.stringify(good)]]);
  if (errors.length || base.length !== 1) { console.log("FAIL the good object is refused:", errors); bad++; }
  for (const [name, mutate] of Object.entries(cases)) {
    errors.length = 0;
    const d = structuredClone(good);
    mutate(d);
    await validate([[`${name}.yaml`, YAML.stringify(d)]]);
    if (errors.length) console.log(`ok   ${name} refused: ${errors[0]}`);
    else { console.log(`FAIL ${name} was accepted`); bad++; }
  }
  process.exit(bad ? 1 : 0);
}

const docs = await validate(readTree(first));
checkDaemonSet(docs);
for (const e of errors) console.log(`FAIL ${e}`);
if (errors.length) process.exit(1);
const kinds = docs.map((d) => `${d.doc.kind} ${d.doc.metadata?.name ?? ""}`.trim());
console.log(`ok   ${docs.length} objects valid against the Kubernetes API schema, no unknown fields: ${kinds.join(", ")}`);
