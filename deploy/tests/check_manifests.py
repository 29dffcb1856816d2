#!/usr/bin/env python3
"""Checks deploy/k8s beyond its schemas: the flags every container passes are
flags its program's --help lists, the GLM_ environment variables are ones a
glm program reads, every volume a container mounts is defined and every claim and
secret it names exists (claims in the manifests, secrets among those
deploy/README.md creates), pods run as non-root with resource requests, GPU
workers ask for GPUs with NVLink multicast off, and the PodMonitor selects
the coordinator's pod and a port it has, with no annotation-based scrape
beside it.

Usage: check_manifests.py BIN_DIR MANIFEST.yaml...
"""
import pathlib
import re
import subprocess
import sys

import yaml

README = pathlib.Path("deploy/README.md")
# The pod launcher passes its arguments to every glm-worker it starts.
LAUNCHER = pathlib.Path("deploy/docker/glm-workers")
PROGRAM_OF = {"glm-coordinator": "glm-coordinator", "glm-worker": "glm-worker",
              "glm-workers": "glm-worker", "glmctl": "glmctl"}

errors = []


def help_text(bin_dir, program):
    # glmctl's job flags are those of its job commands; submit has them all.
    command = [f"{bin_dir}/{program}"] + (["submit"] if program == "glmctl" else [])
    run = subprocess.run(command + ["--help"], capture_output=True, text=True)
    return run.stdout + run.stderr


def pod_templates(documents):
    for doc in documents:
        spec = doc.get("spec", {})
        if "template" in spec:
            yield doc, spec["template"]


def check_container(where, container, helps, pod_volumes, gpu_expected):
    program = PROGRAM_OF.get(pathlib.Path(container["command"][0]).name)
    if program is None:
        errors.append(f"{where}: runs {container['command'][0]}, not a glm program")
        return
    for arg in container.get("args", []):
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and not re.search(rf"{re.escape(flag)}\b", helps[program]):
            errors.append(f"{where}: {flag} is not a flag of {program} (--help)")
    # glmctl run in the pod (kubectl exec) reads the container's variables too.
    readers = "".join(helps.values()) + LAUNCHER.read_text()
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    for name in env:
        if name.startswith("GLM_") and name not in readers:
            errors.append(f"{where}: {name} is read by no glm program")
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in pod_volumes:
            errors.append(f"{where}: mounts undefined volume {mount['name']}")
    requests = container.get("resources", {}).get("requests", {})
    for resource in ("cpu", "memory"):
        if resource not in requests:
            errors.append(f"{where}: no {resource} request")
    if container.get("securityContext", {}).get("allowPrivilegeEscalation") is not False:
        errors.append(f"{where}: allowPrivilegeEscalation is not false")
    gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if gpu_expected:
        if not gpus:
            errors.append(f"{where}: a GPU worker without an nvidia.com/gpu limit")
        if env.get("NCCL_NVLS_ENABLE") != "0":
            errors.append(f"{where}: a GPU worker without NCCL_NVLS_ENABLE=0")
        if env.get("GLM_WORKERS") != str(gpus):
            errors.append(f"{where}: GLM_WORKERS {env.get('GLM_WORKERS')} != {gpus} GPUs")


def main():
    bin_dir, paths = sys.argv[1], sys.argv[2:]
    documents = [d for p in paths for d in yaml.safe_load_all(open(p)) if d]
    helps = {p: help_text(bin_dir, p) for p in set(PROGRAM_OF.values())}
    claims = {d["metadata"]["name"] for d in documents if d["kind"] == "PersistentVolumeClaim"}
    readme = README.read_text()
    pods = {}
    for doc, template in pod_templates(documents):
        name = doc["metadata"]["name"]
        spec = template["spec"]
        pods[name] = template
        if "prometheus.io/scrape" in template["metadata"].get("annotations", {}):
            errors.append(f"{name}: annotation scrape beside the PodMonitor")
        if spec.get("securityContext", {}).get("runAsNonRoot") is not True:
            errors.append(f"{name}: pod does not run as non-root")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for volume in volumes.values():
            claim = volume.get("persistentVolumeClaim", {}).get("claimName")
            if claim and claim not in claims:
                errors.append(f"{name}: volume claim {claim} is defined nowhere")
            secret = volume.get("secret", {}).get("secretName")
            if secret and f"kubectl create secret generic {secret}" not in readme:
                errors.append(f"{name}: secret {secret} is not created in {README}")
        gpu = template["metadata"].get("labels", {}).get("glm/device") == "cuda"
        for container in spec["containers"]:
            check_container(f"{name}/{container['name']}", container, helps, volumes, gpu)
    for doc in documents:
        if doc["kind"] != "PodMonitor":
            continue
        wanted = doc["spec"]["selector"]["matchLabels"]
        selected = [t for t in pods.values()
                    if wanted.items() <= t["metadata"].get("labels", {}).items()]
        if len(selected) != 1:
            errors.append(f"PodMonitor selects {len(selected)} pod templates, not one")
            continue
        ports = {p["name"] for c in selected[0]["spec"]["containers"] for p in c.get("ports", [])}
        for endpoint in doc["spec"]["podMetricsEndpoints"]:
            if endpoint["port"] not in ports:
                errors.append(f"PodMonitor scrapes port {endpoint['port']}, the pod has {ports}")
    for error in errors:
        print(f"FAIL: {error}")
    if errors:
        sys.exit(1)
    print(f"{len(documents)} resources, {len(pods)} pod templates: flags, volumes, "
          "secrets, security and monitoring consistent")


if __name__ == "__main__":
    main()
