// The Python interpreter an SDK integration test (openai_sdk, anthropic_sdk, openai_agents,
// responses_sdk, structured_outputs, schemathesis) runs its check script with, and whether it
// can: the test is SKIPPED with the reason when it cannot, so a checkout without the SDKs still
// passes. tests/run_all.sh makes the interpreter (build/ci-venv) and installs the SDKs there.
//
//   const SdkPython py = FindSdkPython("DELTASERVE_OPENAI_PYTHON", DEFAULT_PYTHON,
//                                      "import openai; print(openai.__version__)",
//                                      "pip install openai==1.109.1");
//   if (!py.skip_reason.empty()) GTEST_SKIP() << py.skip_reason;
//   RunProcess({py.path, SCRIPT, ...});
#pragma once

#include <string>

namespace deltaserve::testing {

struct SdkPython {
  std::string path;         // the interpreter
  std::string skip_reason;  // empty when it runs `probe`; else why not (the skip message)
  std::string probe_out;    // what `probe` printed (e.g. the SDK's version), for failure messages
};

// $`env_var` when set and not empty, else `default_python`; then runs `python -c probe` (the
// imports the check needs). `install_hint` is how to get them (e.g. "pip install openai==1.x"),
// quoted in the skip reason.
SdkPython FindSdkPython(const char* env_var, const std::string& default_python,
                        const std::string& probe, const std::string& install_hint);

}  // namespace deltaserve::testing
