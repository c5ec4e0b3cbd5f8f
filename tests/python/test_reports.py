"""Model.explain(), Model.roofline() and Model.save_bundle() give what the CLI's explain --json,
roofline --json and compile -o give for the same model."""

import json
import os
import subprocess

import pytest

import kiln


@pytest.mark.parametrize("name,strict", [("demo", False), ("mlp_ln", False), ("mlp_ln", True)])
def test_explain_is_the_cli_json(models_dir, kiln_cli, name, strict):
    path = os.path.join(models_dir, name + ".onnx")
    cli = json.loads(subprocess.run([kiln_cli, "explain", path, "--json"] + (["--strict-fp"] if strict else []),
                                    capture_output=True, text=True, check=True).stdout)
    got = kiln.compile(path, strict_fp=strict).explain()
    # analysis_ms is the time the partitioner spent: the one field that differs between runs.
    for d in (cli, got):
        d.pop("analysis_ms")
    assert got == cli
    assert got["kernel_count"] == kiln.compile(path).kernel_count


def kernel_facts(report):
    """What does not depend on timing: each kernel's name, kind, FLOPs and DRAM bytes (the report
    lists kernels by time, so in an order that varies)."""
    return sorted((k["name"], k["kind"], k["flops"], k["dram_bytes"]) for k in report["kernels"])


def test_roofline_is_the_cli_report(models_dir, kiln_cli):
    path = os.path.join(models_dir, "demo.onnx")
    cli = json.loads(subprocess.run([kiln_cli, "roofline", path, "--json", "--runs", "3", "--warmup", "1"],
                                    capture_output=True, text=True, check=True).stdout)
    model = kiln.compile(path)
    got = model.roofline(runs=3, warmup=1)
    assert got.keys() == cli.keys() and got["unfused"].keys() == cli["unfused"].keys()
    assert got["machine"] == cli["machine"]  # the same cached probe
    for key in ("total_flops", "total_dram_bytes", "kernel_count", "runs"):
        assert got[key] == cli[key] and got["unfused"][key] == cli["unfused"][key], key
    assert kernel_facts(got) == kernel_facts(cli)
    assert kernel_facts(got["unfused"]) == kernel_facts(cli["unfused"])
    assert all(k["time_ms"] > 0 for k in got["kernels"] if k["generated"])
    fused_only = model.roofline(runs=2, warmup=0, compare_unfused=False)
    assert "unfused" not in fused_only and kernel_facts(fused_only) == kernel_facts(cli)
    with pytest.raises(kiln.UsageError):
        model.roofline(runs=0)


def test_save_bundle_is_the_cli_bundle(models_dir, kiln_cli, tmp_path):
    path = os.path.join(models_dir, "demo.onnx")
    kiln.compile(path).save_bundle(tmp_path / "py")
    subprocess.run([kiln_cli, "compile", path, "-o", str(tmp_path / "cli")], check=True, capture_output=True)
    names = sorted(os.listdir(tmp_path / "cli"))
    assert sorted(os.listdir(tmp_path / "py")) == names and "kiln_model.c" in names and "weights.bin" in names
    for n in names:
        assert (tmp_path / "py" / n).read_bytes() == (tmp_path / "cli" / n).read_bytes(), n
