"""mirage-opt's --mirage-superoptimize caches its results by default in the user cache
directory (`mirage.paths.search_cache_dir()`: $MIRAGE_CACHE_DIR/search, else
$XDG_CACHE_HOME/mirage/search, else ~/.cache/mirage/search); `cache-dir=none` disables it."""
import os
import re
import subprocess
import sys

PROGRAM = """
func.func @{name}(%x: tensor<2x256xf16>, %g: tensor<256xf16>, %w: tensor<256x256xf16>) -> tensor<2x256xf16> {{
  %0 = kn.rms_norm %x {{normalized_shape = array<i64: 256>}} : tensor<2x256xf16> -> tensor<2x256xf16>
  %1 = kn.mul %0, %g : (tensor<2x256xf16>, tensor<256xf16>) -> tensor<2x256xf16>
  %2 = kn.matmul %1, %w : (tensor<2x256xf16>, tensor<256x256xf16>) -> tensor<2x256xf16>
  return %2 : tensor<2x256xf16>
}}
"""
OPTS = "max-block-ops=7 workers=1 time-limit=60"


def mirage_opt(tmp_path, name, options, env):
    src = tmp_path / f"{name}.mlir"
    src.write_text(PROGRAM.format(name=name))
    proc = subprocess.run([sys.executable, "-m", "mirage.mlir.opt", str(src),
                           f"--mirage-superoptimize={options}"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc.stdout, proc.stderr


def entries(d):
    return sorted(p.name for p in d.glob("*.mlir")) if d.exists() else []


def xdg_env(tmp_path):
    """Only XDG_CACHE_HOME says where the user cache is (no MIRAGE_CACHE_DIR)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONUNBUFFERED="1")
    env.pop("MIRAGE_CACHE_DIR", None)
    return env


def test_default_cache_is_written_then_hit_by_a_repeat_and_a_renamed_copy(tmp_path):
    env = xdg_env(tmp_path)
    cache = tmp_path / "xdg" / "mirage" / "search"
    out1, err1 = mirage_opt(tmp_path, "rmsnorm_linear", OPTS, env)
    assert "[search] enumeration" in err1 and "from cache" not in err1
    assert "kn.graph_def" in out1
    files = entries(cache)
    assert len(files) == 1, files
    text = (cache / files[0]).read_text()
    assert "@rmsnorm_linear_0" in text and "kn.graph_def" in text

    out2, err2 = mirage_opt(tmp_path, "rmsnorm_linear", OPTS, env)
    assert "[search] enumeration" not in err2  # no search ran
    assert f"(from cache {cache})" in err2
    assert out2 == out1
    assert entries(cache) == files

    # the same program under another name: the same entry, the result under the new name
    out3, err3 = mirage_opt(tmp_path, "other_name", OPTS, env)
    assert "[search] enumeration" not in err3 and f"(from cache {cache})" in err3
    assert "func.func @other_name(" in out3 and "@rmsnorm_linear" not in out3
    assert out3.replace("@other_name", "@rmsnorm_linear") == out1
    assert entries(cache) == files


def test_cache_dir_none_writes_nothing(tmp_path):
    env = xdg_env(tmp_path)
    for _ in range(2):  # the second run searches again
        out, err = mirage_opt(tmp_path, "rmsnorm_linear", OPTS + " cache-dir=none", env)
        assert "[search] enumeration" in err and "from cache" not in err
        assert "kn.graph_def" in out
    assert not (tmp_path / "xdg").exists()


def test_cache_dir_option_and_mirage_cache_dir(tmp_path):
    env = xdg_env(tmp_path)
    env["MIRAGE_CACHE_DIR"] = str(tmp_path / "root")  # overrides XDG_CACHE_HOME
    _, err = mirage_opt(tmp_path, "rmsnorm_linear", OPTS + " verbose=0", env)
    assert err == ""  # verbose=0: no progress, no report
    assert len(entries(tmp_path / "root" / "search")) == 1 and not (tmp_path / "xdg").exists()
    _, err = mirage_opt(tmp_path, "rmsnorm_linear", OPTS + f" cache-dir={tmp_path / 'mine'}", env)
    assert "[search] enumeration" in err  # another folder: not answered from the first
    assert len(entries(tmp_path / "mine")) == 1


def test_a_cache_dir_that_cannot_be_made_is_skipped_with_a_warning(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    out, err = mirage_opt(tmp_path, "rmsnorm_linear", OPTS + f" cache-dir={tmp_path / 'file' / 'sub'}",
                          xdg_env(tmp_path))
    assert re.search(r"warning: mirage-superoptimize: cache directory .*/file/sub cannot be created", err), err
    assert "searching without a cache" in err and "kn.graph_def" in out
