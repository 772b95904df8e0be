"""`kiln devices`: the CPU always, the GPU or one line saying why there is none."""


def test_devices_lists_the_cpu_and_the_gpu_or_why_not(kiln):
    r = kiln("devices")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("cpu: ")
    gpu = [l for l in lines if l.startswith("gpu")]
    assert gpu, r.stdout
    if gpu[0].startswith("gpu: "):
        # No GPU here: the reason is one of the documented ones.
        assert ("no GPU backend library found" in gpu[0] or "no GPU available: " in gpu[0]), gpu[0]
        assert kiln("devices", "--require-gpu").returncode == 1
    else:
        assert any(l.strip().startswith("target: ") for l in lines), r.stdout


def test_devices_names_a_missing_gpu_library(kiln, tmp_path):
    missing = tmp_path / "libkiln_gpu_cuda.so"
    r = kiln("devices", "--gpu-library", missing, "--require-gpu")
    assert r.returncode == 1
    assert f"gpu: GPU backend library {missing} (KILN_GPU_BACKEND or --gpu-library) does not exist" \
        in r.stdout


def test_devices_refuses_a_file_that_is_not_a_gpu_library(kiln, tmp_path):
    bogus = tmp_path / "libbogus.so"
    bogus.write_text("not a library")
    r = kiln("devices", env={"KILN_GPU_BACKEND": str(bogus)})
    assert r.returncode == 0
    assert "libbogus.so: cannot be loaded" in r.stdout


def test_run_and_bench_place_nodes_on_the_device_asked_for(kiln, demo):
    # The CPU always runs; an unknown device names the known ones; a GPU either runs the model
    # (nodes it cannot run fall back to the CPU) or says why it cannot open.
    for command in ("run", "bench"):
        extra = ["--iterations", "3", "--warmup", "0"] if command == "bench" else []
        r = kiln(command, demo, "--device", "cpu", *extra)
        assert r.returncode == 0, r.stderr
        r = kiln(command, demo, "--device", "rocm:0", *extra)
        assert r.returncode != 0
        assert "unknown device 'rocm:0': this build knows cpu, gpu" in r.stderr, r.stderr
    has_gpu = kiln("devices", "--require-gpu").returncode == 0
    r = kiln("run", demo, "--device", "gpu")
    if has_gpu:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode != 0
        assert "device 'gpu' is not available: " in r.stderr, r.stderr
