"""Rules the schemas cannot express, checked across deploy/'s files: every deployable is present, has
probes, resources and a non-root user; selectors select something; the sweep runs `--once`; the image is
multi-stage and non-root. Usage: python check_rules.py DEPLOY_DIR. Prints one line per finding; exit 1
if any."""

import pathlib
import re
import sys

import yaml

findings = []


def finding(where, what):
    findings.append(f"{where}: {what}")


def compose_rules(path):
    doc = yaml.safe_load(path.read_text())
    services = doc.get("services", {})
    for name in ("postgres", "migrate", "api", "worker", "reconciler", "simulator"):
        if name not in services:
            finding(path.name, f"service {name!r} is missing")
    worker = services.get("worker", {})
    replicas = worker.get("deploy", {}).get("replicas")
    if not isinstance(replicas, int) or replicas < 2:
        finding(path.name, f"worker must run at least 2 replicas (deploy.replicas), found {replicas!r}")
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}) or {}:
            if dep not in services:
                finding(path.name, f"{name} depends on unknown service {dep!r}")
        if name == "migrate":
            if svc.get("command") != ["migrate"]:
                finding(path.name, "the migrate service must run `payonce migrate`")
            continue
        test = (svc.get("healthcheck") or {}).get("test")
        if not test:
            finding(path.name, f"{name} has no healthcheck")
    images = {svc.get("image") for n, svc in services.items() if n != "postgres"}
    if len(images) != 1:
        finding(path.name, f"every payonce service must run the one image, found {sorted(map(str, images))}")


def k8s_docs(dir_):
    for path in sorted(dir_.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def pod_spec(doc):
    kind = doc["kind"]
    if kind in ("Deployment", "Job"):
        return doc["spec"]["template"]
    if kind == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]
    return None


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def k8s_rules(dir_):
    docs = list(k8s_docs(dir_))
    by_kind = {}
    for name, doc in docs:
        by_kind.setdefault(doc["kind"], []).append((name, doc))
    names = {(d["kind"], d["metadata"]["name"]) for _, d in docs}
    deployments = {d["metadata"]["name"]: (f, d) for f, d in by_kind.get("Deployment", [])}
    for want in ("payonce-api", "payonce-worker", "payonce-reconciler"):
        if want not in deployments:
            finding("k8s", f"Deployment {want} is missing")
    for f, doc in docs:
        template = pod_spec(doc)
        if template is None:
            continue
        where = f"{f} {doc['kind']}/{doc['metadata']['name']}"
        spec = template["spec"]
        if not (spec.get("securityContext") or {}).get("runAsNonRoot"):
            finding(where, "pods must set securityContext.runAsNonRoot")
        for c in spec["containers"]:
            res = c.get("resources") or {}
            if not res.get("requests") or not (res.get("limits") or {}).get("memory"):
                finding(where, f"container {c['name']} needs resource requests and a memory limit")
            for src in c.get("envFrom", []):
                ref = src.get("secretRef") or src.get("configMapRef")
                kind = "Secret" if "secretRef" in src else "ConfigMap"
                if (kind, ref["name"]) not in names:
                    finding(where, f"envFrom names a missing {kind} {ref['name']!r}")
            if doc["kind"] == "Deployment":
                ports = {p.get("name") for p in c.get("ports", [])} | {p["containerPort"] for p in c.get("ports", [])}
                for probe in ("livenessProbe", "readinessProbe"):
                    p = c.get(probe)
                    if not p:
                        finding(where, f"container {c['name']} has no {probe}")
                        continue
                    http = p.get("httpGet") or {}
                    if http.get("port") not in ports:
                        finding(where, f"{probe} port {http.get('port')!r} is not a container port")
                    want = "/healthz" if probe == "livenessProbe" else "/readyz"
                    if http.get("path") != want:
                        finding(where, f"{probe} must GET {want}")
                # A pod on a schema it cannot serve goes unready (docs/runbook.md, "Upgrading"):
                # out of rotation within 30 s, not after minutes of failed requests.
                ready = c.get("readinessProbe") or {}
                if ready.get("periodSeconds", 10) * ready.get("failureThreshold", 3) > 30:
                    finding(where, "readinessProbe takes longer than 30 s to see a broken pod")
            # Only the migration Job changes the schema: a serving pod that migrated would move it
            # under the pods of the release before (issue 56).
            if doc["kind"] != "Job":
                for c in spec["containers"] + spec.get("initContainers", []):
                    if "migrate" in (c.get("args") or []) + (c.get("command") or []):
                        finding(where, f"container {c['name']} runs `payonce migrate`: only the migrate Job may")
        for v in spec.get("volumes", []):
            if "configMap" in v and ("ConfigMap", v["configMap"]["name"]) not in names:
                finding(where, f"volume names a missing ConfigMap {v['configMap']['name']!r}")
    pods = [d["spec"]["template"]["metadata"]["labels"] for _, d in by_kind.get("Deployment", [])]
    for f, doc in by_kind.get("PodDisruptionBudget", []) + by_kind.get("Service", []):
        sel = doc["spec"]["selector"]
        sel = sel.get("matchLabels", sel) if doc["kind"] == "PodDisruptionBudget" else sel
        if not any(matches(sel, labels) for labels in pods):
            finding(f"{f} {doc['kind']}/{doc['metadata']['name']}", f"selector {sel} selects no Deployment's pods")
    if not by_kind.get("PodDisruptionBudget"):
        finding("k8s", "no PodDisruptionBudget")
    cron = by_kind.get("CronJob", [])
    if not any(
        {"sweep", "--once"} <= set(c.get("args", []))
        for _, d in cron
        for c in pod_spec(d)["spec"]["containers"]
    ):
        finding("k8s", "no CronJob runs `payonce reconciler sweep --once`")
    if not any(
        c.get("args") == ["migrate"] for _, d in by_kind.get("Job", []) for c in pod_spec(d)["spec"]["containers"]
    ):
        finding("k8s", "no Job runs `payonce migrate`")


def systemd_rules(dir_):
    units = {p.name: p.read_text() for p in dir_.glob("*") if p.suffix in (".service", ".timer")}
    for want in (
        "payonce-api.service",
        "payonce-worker@.service",
        "payonce-reconciler.service",
        "payonce-sweep.service",
        "payonce-sweep.timer",
        "payonce-migrate.service",
    ):
        if want not in units:
            finding("systemd", f"{want} is missing")
    for name, text in units.items():
        m = re.search(r"^Unit=(.+)$", text, re.M)
        if m and m.group(1).strip() not in units:
            finding(name, f"starts missing unit {m.group(1).strip()}")
        if name.endswith(".service"):
            if not re.search(r"^User=(?!root$)\S+", text, re.M):
                finding(name, "must run as a non-root User=")
            if "sweep" in name and "--once" not in text:
                finding(name, "the sweep must run `reconciler sweep --once`")


def dockerfile_rules(path):
    lines = [l.strip() for l in path.read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")]
    froms = [l for l in lines if l.upper().startswith("FROM ")]
    if len(froms) < 2:
        finding(path.name, "must be multi-stage (a builder and a runtime)")
    elif not froms[0].split()[1].startswith("rust:1.95"):
        finding(path.name, "the builder must be rust:1.95")
    elif "slim" not in froms[-1].split()[1]:
        finding(path.name, "the runtime must be a slim image")
    last = max((i for i, l in enumerate(lines) if l.upper().startswith("FROM ")), default=0)
    users = [l.split()[1] for l in lines[last:] if l.upper().startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        finding(path.name, "the runtime stage must switch to a non-root USER")


def main():
    root = pathlib.Path(sys.argv[1])
    compose_rules(root / "compose.yaml")
    k8s_rules(root / "k8s")
    systemd_rules(root / "systemd")
    dockerfile_rules(root / "Dockerfile")
    for f in findings:
        print(f"rule: {f}")
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
