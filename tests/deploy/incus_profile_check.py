#!/usr/bin/env python3
"""The Incus profiles of deploy/incus (ctest label `deploy`): each parses as YAML and uses only
instance options and device keys of Incus's documentation (the tables "Instance options" and
"Type: gpu" / "Type: disk" of linuxcontainers.org/incus/docs, written out below since Incus is
not in Debian 12's main archive to ask), the GPU profile passes a GPU through with the NVIDIA
runtime, and launch.sh loads the profiles it names."""
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCUS = ROOT / "deploy" / "incus"
CONFIG_KEYS = {"limits.cpu", "limits.memory", "limits.memory.enforce", "limits.processes",
               "nvidia.runtime", "nvidia.driver.capabilities", "nvidia.require.cuda",
               "security.nesting", "security.privileged", "boot.autostart"}
DEVICE_KEYS = {
    "gpu": {"type", "gputype", "id", "pci", "vendorid", "productid", "uid", "gid", "mode"},
    "disk": {"type", "source", "path", "readonly", "required", "shift"},
}
GPU_TYPES = {"physical", "mdev", "mig", "sriov"}

problems = []
profiles = sorted(INCUS.glob("*.yaml"))
if len(profiles) < 2:
    problems.append("expected a GPU and a CPU worker profile")
for p in profiles:
    doc = yaml.safe_load(p.read_text())
    if set(doc) - {"description", "config", "devices"}:
        problems.append(f"{p.name}: unknown top-level keys {set(doc) - {'description', 'config', 'devices'}}")
    for k, v in (doc.get("config") or {}).items():
        if k not in CONFIG_KEYS:
            problems.append(f"{p.name}: config key {k} is not an instance option used here")
        if not isinstance(v, str):
            problems.append(f"{p.name}: config {k} must be a string (Incus stores strings)")
    for name, dev in (doc.get("devices") or {}).items():
        kind = dev.get("type")
        if kind not in DEVICE_KEYS:
            problems.append(f"{p.name}: device {name} of type {kind}")
            continue
        if set(dev) - DEVICE_KEYS[kind]:
            problems.append(f"{p.name}: device {name}: unknown keys {set(dev) - DEVICE_KEYS[kind]}")
        if kind == "disk" and not {"source", "path"} <= set(dev):
            problems.append(f"{p.name}: disk {name} needs source and path")
        if kind == "gpu" and dev.get("gputype", "physical") not in GPU_TYPES:
            problems.append(f"{p.name}: gpu {name}: gputype {dev.get('gputype')}")
gpu = yaml.safe_load((INCUS / "deltaserve-gpu-worker.yaml").read_text())
if not any(d.get("type") == "gpu" for d in gpu["devices"].values()):
    problems.append("the GPU profile passes no GPU through")
if gpu["config"].get("nvidia.runtime") != "true":
    problems.append("the GPU profile lacks nvidia.runtime")
launch = (INCUS / "launch.sh").read_text()
if '"$here/deltaserve-$p.yaml"' not in launch or "for p in cpu-worker gpu-worker" not in launch:
    problems.append("launch.sh no longer loads deltaserve-{cpu,gpu}-worker.yaml")
if problems:
    print("FAIL:\n  " + "\n  ".join(problems))
    sys.exit(1)
print(f"incus profiles: {len(profiles)} clean")
print("1 passed, 0 failed")
