#include "tests/integration/sdk_python.h"

#include <unistd.h>

#include <cstdlib>

#include "tests/support/subprocess.h"

namespace deltaserve::testing {

SdkPython FindSdkPython(const char* env_var, const std::string& default_python,
                        const std::string& probe, const std::string& install_hint) {
  SdkPython py;
  const char* env = std::getenv(env_var);
  py.path = env != nullptr && *env != '\0' ? env : default_python;
  if (::access(py.path.c_str(), X_OK) != 0) {
    py.skip_reason = "no Python interpreter at " + py.path + " (set " + env_var +
                     ", or run tests/run_all.sh, which makes that venv: " + install_hint + ")";
    return py;
  }
  const ProcessResult run = RunProcess({py.path, "-c", probe});
  if (run.exit_code != 0) {
    py.skip_reason = py.path + " cannot run `" + probe + "` (" + install_hint + "): " + run.err;
    return py;
  }
  py.probe_out = run.out;
  return py;
}

}  // namespace deltaserve::testing
