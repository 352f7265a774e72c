#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The DaemonSet's pod template as podman would run it on a node.

Reads deploy/kubernetes/base/daemonset.yaml (the manifest itself: the test
has no copy of the pod's settings) and prints, NUL-separated, what one
container of the pod needs:

  pod_template.py MANIFEST run CONTAINER --name NAME --image IMAGE --node NODE
      --netns PATH [--volume NAME=DIR]... [--host-path PATH=DIR]...
      [--without-cap CAP]... [--extra-cap CAP]...
    the arguments of `podman run` for the container (the image and the
    container's args included): hostNetwork as the node's network namespace,
    command and args, env (spec.nodeName as NODE), securityContext
    (privileged, runAsUser, allowPrivilegeEscalation, readOnlyRootFilesystem,
    capabilities, seccompProfile), volumes (hostPath as bind mounts with
    their mountPropagation; configMap and emptyDir volumes from the DIR the
    caller made for them) and the memory limit
  pod_template.py MANIFEST probe CONTAINER readinessProbe|livenessProbe
    the probe's exec command
  pod_template.py MANIFEST init | containers
    the init containers', or the containers', names in order
  pod_template.py MANIFEST grace
    terminationGracePeriodSeconds

--host-path PATH=DIR puts a hostPath volume of PATH at DIR instead: the
lab's two nodes share one host, so each gets a /run/dualpath of its own.
--without-cap CAP and --extra-cap CAP take a capability from, or add one
to, the container's (to show that each one granted is needed).
"""
import argparse
import json
import os
import sys

import yaml

PROPAGATION = {None: "rprivate", "None": "rprivate", "HostToContainer": "rslave",
               "Bidirectional": "rshared"}


def die(msg):
    print(f"pod_template.py: {msg}", file=sys.stderr)
    sys.exit(1)


def pod_spec(manifest):
    with open(manifest, encoding="utf-8") as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc.get("kind") == "DaemonSet":
                return doc["spec"]["template"]["spec"]
    die(f"{manifest}: no DaemonSet")


def container(pod, name):
    for c in pod.get("initContainers", []) + pod["containers"]:
        if c["name"] == name:
            return c
    die(f"no container {name} in the pod template")


def mebibytes(q):
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for u, f in units.items():
        if q.endswith(u):
            return int(float(q[: -len(u)]) * f)
    die(f"memory quantity {q}: not understood")


def run_args(pod, c, a):
    vols = dict(v.split("=", 1) for v in a.volume)
    remap = dict(p.split("=", 1) for p in a.host_path)
    out = ["--name", a.name]
    if pod.get("hostNetwork"):
        out += ["--network", f"ns:{a.netns}"]
    else:
        die("the pod is not on the host network: this runner gives it the node's")
    if pod.get("hostPID") or pod.get("hostIPC"):
        die("hostPID/hostIPC: not run here")
    sc = c.get("securityContext", {})
    if sc.get("privileged"):
        out.append("--privileged")
    if "runAsUser" in sc:
        out += ["--user", str(sc["runAsUser"])]
    if sc.get("allowPrivilegeEscalation") is False:
        out += ["--security-opt", "no-new-privileges"]
    if sc.get("readOnlyRootFilesystem"):
        # Kubernetes adds no tmpfs where podman would (/run, /tmp, /var/tmp)
        out += ["--read-only", "--read-only-tmpfs=false"]
    caps = sc.get("capabilities", {})
    for cap in caps.get("drop", []):
        out += ["--cap-drop", cap]
    for cap in caps.get("add", []):
        if cap not in a.without_cap:
            out += ["--cap-add", cap]
    for cap in a.extra_cap:
        out += ["--cap-add", cap]
    seccomp = sc.get("seccompProfile", {}).get("type")
    if seccomp == "Unconfined":
        out += ["--security-opt", "seccomp=unconfined"]
    elif seccomp not in (None, "RuntimeDefault"):
        die(f"seccompProfile {seccomp}: not run here")
    for e in c.get("env", []):
        if "value" in e:
            out += ["--env", f"{e['name']}={e['value']}"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            out += ["--env", f"{e['name']}={a.node}"]
        else:
            die(f"env {e['name']}: only values and spec.nodeName are run here")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = volumes.get(m["name"]) or die(f"volumeMount {m['name']}: no such volume")
        ro = m.get("readOnly", False)
        if "hostPath" in v:
            path, kind = v["hostPath"]["path"], v["hostPath"].get("type", "")
            src = remap.get(path, path)
            if kind == "DirectoryOrCreate":
                os.makedirs(src, mode=0o755, exist_ok=True)
            elif kind == "Directory" and not os.path.isdir(src):
                die(f"hostPath {path} ({src}) is not a directory: the kubelet would not start the pod")
        elif "configMap" in v or "emptyDir" in v:
            src = vols.get(m["name"]) or die(f"volume {m['name']}: give its directory (--volume)")
            ro = ro or "configMap" in v  # a configMap volume is read-only
        else:
            die(f"volume {m['name']}: only hostPath, configMap and emptyDir are run here")
        prop = m.get("mountPropagation")
        if prop not in PROPAGATION:
            die(f"mountPropagation {prop}: unknown")
        opts = ["ro"] if ro else []
        opts.append(PROPAGATION[prop])
        out += ["--volume", f"{src}:{m['mountPath']}:{','.join(opts)}"]
    limit = c.get("resources", {}).get("limits", {}).get("memory")
    if limit:
        out += ["--memory", f"{mebibytes(limit)}m"]
    if "command" in c:
        out += ["--entrypoint", json.dumps(c["command"])]
    out.append(a.image)
    out += [str(x) for x in c.get("args", [])]
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("manifest")
    p.add_argument("what", choices=["run", "probe", "init", "containers", "grace"])
    p.add_argument("container", nargs="?")
    p.add_argument("probe", nargs="?")
    p.add_argument("--name")
    p.add_argument("--image")
    p.add_argument("--node")
    p.add_argument("--netns")
    p.add_argument("--volume", action="append", default=[])
    p.add_argument("--host-path", action="append", default=[])
    p.add_argument("--without-cap", action="append", default=[])
    p.add_argument("--extra-cap", action="append", default=[])
    a = p.parse_args()
    pod = pod_spec(a.manifest)
    if a.what == "init":
        out = [c["name"] for c in pod.get("initContainers", [])]
    elif a.what == "containers":
        out = [c["name"] for c in pod["containers"]]
    elif a.what == "grace":
        out = [str(pod.get("terminationGracePeriodSeconds", 30))]
    elif a.what == "probe":
        probe = container(pod, a.container).get(a.container and a.probe) or die(f"{a.container}: no {a.probe}")
        out = probe.get("exec", {}).get("command") or die(f"{a.probe}: only exec probes are run here")
    else:
        for need in ("name", "image", "node", "netns"):
            if getattr(a, need) is None:
                die(f"run needs --{need}")
        out = run_args(pod, container(pod, a.container), a)
    sys.stdout.write("".join(f"{x}\0" for x in out))


if __name__ == "__main__":
    main()
