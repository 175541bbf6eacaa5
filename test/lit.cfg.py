# lit configuration shared by every suite under test/. Substitutions:
#   %telosc, %telos-run     the built tools
#   %src                    the repository root (models/, test/fixtures/)
#   FileCheck, not          LLVM's FileCheck and a negating wrapper
import ctypes
import os
import shutil
import sys

import lit.formats

site = lit_config.params.get("telos_site_config")
if site is None:
    lit_config.fatal("run through ctest: --param telos_site_config=BUILD/test/lit.site.cfg.py")
exec(open(site).read())

config.name = "telos"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test"]
config.excludes = ["Inputs", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
# Output/ folders (%t) and lit's timing cache go to the build tree, never into the sources: to
# the folder ctest gives each test file (telos_exec_root), else to BUILD/test.
config.test_exec_root = lit_config.params.get(
    "telos_exec_root", os.path.join(config.telos_build_root, "test"))

bin_dir = os.path.join(config.telos_build_root, "bin")
config.substitutions.append(("%telosc", os.path.join(bin_dir, "telosc")))
config.substitutions.append(("%telos-run", os.path.join(bin_dir, "telos-run")))
config.substitutions.append(("%src", config.telos_src_root))
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("FileCheck", config.telos_filecheck))
not_tool = shutil.which("not", path="/usr/lib/llvm-14/bin")
if not_tool:
    config.substitutions.append(("not ", not_tool + " "))
config.environment["PATH"] = os.pathsep.join([bin_dir, config.environment.get("PATH", "")])
config.environment["CUDA_HOME"] = os.path.dirname(config.telos_cuda_bin)
# The tests' shared kernel cache (test/CMakeLists.txt says why).
config.environment["TELOS_CACHE_DIR"] = config.telos_kernel_cache

# "nvidia-driver": the NVIDIA driver's library loads here (tests of what telos-run says without it
# are UNSUPPORTED on GPU machines).
try:
    ctypes.CDLL("libcuda.so.1")
    config.available_features.add("nvidia-driver")
except OSError:
    pass
