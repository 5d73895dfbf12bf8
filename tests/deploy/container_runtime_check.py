#!/usr/bin/env python3
"""The runtime stage of each Containerfile can run its binary (ctest label `deploy`).

    container_runtime_check.py BUILD_DIR

Without a container engine: for each image, the shared libraries the built binary loads (ldd)
are mapped to their Debian packages (dpkg -S), and every such package must be in the image's
runtime stage: installed there by name, a dependency of one that is (followed through the
installed packages' Depends/Pre-Depends), or part of debian:12-slim (the Essential packages, apt
and their dependencies). This machine is Debian 12 with the same packages, so the mapping is the
one the image gets.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMAGES = {  # Containerfile -> binary in the build tree
    "router.Containerfile": "router/deltaserve-router",
    "worker.Containerfile": "worker/deltaserve-worker",
}


def sh(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def installed_depends():
    """package -> the packages it depends on (alternatives: all of them), over installed ones."""
    deps = {}
    out = sh("dpkg-query", "-W", "-f", "${Package}\t${Depends}, ${Pre-Depends}\t${Essential}\n")
    essential = set()
    for line in out.splitlines():
        name, dep, ess = line.split("\t")
        deps[name] = {re.sub(r"[:\s(].*", "", d.strip()) for d in re.split(r"[,|]", dep) if d.strip()}
        if ess == "yes":
            essential.add(name)
    return deps, essential


def closure(roots, deps):
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo.extend(deps.get(p, ()))
    return seen


def runtime_packages(containerfile):
    text = (ROOT / "deploy" / "container" / containerfile).read_text()
    last_stage = text.split("\nFROM ")[-1]
    m = re.search(r"apt-get install -y --no-install-recommends(.*?)(?:&&|$)", last_stage, re.S)
    if not m:
        return set()
    return {w for w in m.group(1).replace("\\", " ").split() if not w.startswith("-")}


def main():
    build = pathlib.Path(sys.argv[1])
    deps, essential = installed_depends()
    base = closure(essential | {"apt"}, deps)
    problems = []
    for containerfile, binary in IMAGES.items():
        listed = runtime_packages(containerfile)
        if not listed:
            problems.append(f"{containerfile}: no apt-get install in the runtime stage")
        available = closure(listed, deps) | base
        libs = re.findall(r"=> (/\S+)", sh("ldd", str(build / binary)))
        needed = {}
        candidates = {}
        for lib in libs:
            real = str(pathlib.Path(lib).resolve())
            for c in (lib, real, re.sub(r"^/lib/", "/usr/lib/", lib),
                      re.sub(r"^/usr/lib/", "/lib/", lib)):
                candidates.setdefault(c, lib)
        # One dpkg -S for all paths (it exits 1 when some are not found; the found ones print).
        r = subprocess.run(["dpkg", "-S"] + list(candidates), capture_output=True, text=True)
        owner_of = {}
        for line in r.stdout.splitlines():
            pkgs, path = line.split(": ", 1)
            owner_of.setdefault(candidates.get(path.strip()), pkgs.split(",")[0].split(":")[0])
        for lib in libs:
            owner = owner_of.get(lib)
            if owner is None:
                problems.append(f"{binary}: {lib} belongs to no Debian package")
                continue
            needed.setdefault(owner, []).append(pathlib.Path(lib).name)
        missing = sorted(p for p in needed if p not in available)
        for p in missing:
            problems.append(f"{containerfile}: {binary} needs {p} ({', '.join(needed[p])}), "
                            f"not installed in the runtime stage")
        print(f"{containerfile}: {binary} loads {len(libs)} libraries from {len(needed)} "
              f"packages, all in the image")
    if problems:
        print("FAIL:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
