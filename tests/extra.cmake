# Ecosystem tests (included from tests/CMakeLists.txt):
# - python: the dmref_fixtures package (python/) with pytest, including its
#   agreement with `dmref verify` on a shared candidate set;
#   With the Python module built (python/CMakeLists.txt), PYTHONPATH has it
#   and DMREF_REQUIRE_PKG=1: its tests (test_package.py) cannot skip.
# - consumer: install into a temporary prefix and build a find_package(dmref)
#   project against it (tests/consumer/).
# - python_venv: the package, interop (PyPI safetensors, JAX) and torch tests
#   again with the venv's python (scripts/deps), i.e. with PyPI's torch where
#   the venv has it (`python` uses Debian's python3-torch).
set(DMREF_PY_ENV "DMREF_CLI=$<TARGET_FILE:dmref_cli>;DMREF_REQUIRE_CLI=1;DMREF_FIXTURES=${PROJECT_SOURCE_DIR}/fixtures/golden;PYTHONDONTWRITEBYTECODE=1")
if(TARGET dmref_python)
  list(APPEND DMREF_PY_ENV "PYTHONPATH=${PROJECT_BINARY_DIR}/python" "DMREF_REQUIRE_PKG=1")
endif()
add_test(NAME python
         COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python)
set_tests_properties(python PROPERTIES LABELS python TIMEOUT 600 ENVIRONMENT "${DMREF_PY_ENV}")
if(TARGET dmref_python)
  add_test(NAME python_venv
           COMMAND ${DMREF_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider
                   ${CMAKE_CURRENT_SOURCE_DIR}/python/test_package.py ${CMAKE_CURRENT_SOURCE_DIR}/python/test_interop.py
                   ${CMAKE_CURRENT_SOURCE_DIR}/python/test_example.py ${CMAKE_CURRENT_SOURCE_DIR}/python/test_grad_example.py)
  set_tests_properties(python_venv PROPERTIES LABELS python TIMEOUT 600 ENVIRONMENT "${DMREF_PY_ENV};DMREF_REQUIRE_VENV=1")
endif()
add_test(NAME consumer
         COMMAND ${CMAKE_COMMAND} -DDMREF_BUILD=${PROJECT_BINARY_DIR} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/consumer
                 -DSOURCE=${CMAKE_CURRENT_SOURCE_DIR}/consumer -P ${CMAKE_CURRENT_SOURCE_DIR}/consumer/run.cmake)
set_tests_properties(consumer PROPERTIES LABELS install TIMEOUT 1200)
# - docs: every fenced block of README.md and docs/*.md run (console output
#   compared), or marked with why not (tests/docs/run_docs.py). The C++ blocks
#   are compiled with the flags below against the conformance library.
if(TARGET dmref_python)
  set(DMREF_DOC_INCLUDES -I${PROJECT_SOURCE_DIR}/reference/include -I${MPFI_INCLUDE_DIR} -I${ARB_INCLUDE_DIR}
      -I${ARB_INCLUDE_DIR}/flint "-I$<JOIN:$<TARGET_PROPERTY:Eigen3::Eigen,INTERFACE_INCLUDE_DIRECTORIES>, -I>")
  list(JOIN DMREF_DOC_INCLUDES " " DMREF_DOC_INCLUDES)
  add_test(NAME docs COMMAND ${DMREF_PYTHON_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/docs/run_docs.py)
  set_tests_properties(docs PROPERTIES LABELS docs TIMEOUT 1500 ENVIRONMENT
    "DMREF_BUILD=${PROJECT_BINARY_DIR};DMREF_PYTHONPATH=${PROJECT_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1;DMREF_DOC_CXX=${CMAKE_CXX_COMPILER} -std=c++20 -O1 ${DMREF_DOC_INCLUDES};DMREF_DOC_LIBS=$<TARGET_FILE:dmref_conformance> $<TARGET_FILE:dmref_io> ${MPFI_LIBRARY} ${ARB_LIBRARY} ${FLINT_LIBRARY} -lmpfr -lgmp -lpthread")
endif()
# - pip_install (opt-in: DMREF_TEST_PIP=1 when configuring; ~15 min): the
#   wheel built offline, installed into a fresh venv, README's pytest file run
#   outside the tree without the CLI (tests/python/pip_install.sh).
if(TARGET dmref_python AND "$ENV{DMREF_TEST_PIP}")
  get_filename_component(venv ${DMREF_VENV_PYTHON} DIRECTORY)
  get_filename_component(venv ${venv} DIRECTORY)
  add_test(NAME pip_install COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/pip_install.sh ${PROJECT_SOURCE_DIR} ${venv}
                                    ${CMAKE_CURRENT_BINARY_DIR}/pip_install)
  set_tests_properties(pip_install PROPERTIES LABELS install TIMEOUT 3600)
endif()
# The "What a PASS rules out" table of docs/fixtures.md is the committed
# corpus's: regenerated from fixtures/golden and compared (scripts/tolerance_table.py).
add_test(NAME tolerance_table
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/tolerance_table.py ${PROJECT_SOURCE_DIR}/fixtures/golden
                 --check ${PROJECT_SOURCE_DIR}/docs/fixtures.md)
set_tests_properties(tolerance_table PROPERTIES LABELS docs ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)

# Third-party kernels through the gate (docs/kernels.md): flag-gems' Triton mHC
# kernels on the Triton interpreter and lucidrains' hyper-connections, from the
# pinned PyPI releases that scripts/deps installs into /opt/dmref-venv.
add_test(NAME kernels COMMAND ${DMREF_VENV_PYTHON} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/kernels)
# COST (here and on mutants, faithful, stability_quick): the seconds each took on an idle 2-core machine
# (2026-12-02), so that `ctest -j` starts the longest first; on a clean clone (CI) CTest has no timing
# of its own yet, and a long test started last lengthens the whole run by its own time.
set_tests_properties(kernels PROPERTIES LABELS kernels TIMEOUT 900 COST 182
  ENVIRONMENT "DMREF_CLI=$<TARGET_FILE:dmref_cli>;TRITON_INTERPRET=1;PYTHONDONTWRITEBYTECODE=1")
# tests/kernels/gpu_flaggems.py's three steps (docs/kernels.md, "On a GPU") on this machine, the
# GPU step on the Triton interpreter (flag-gems' generic n = 8 kernels and the op-level fixtures).
add_test(NAME gpu_flaggems_dry COMMAND ${DMREF_VENV_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/kernels/gpu_flaggems.py dry
         ${CMAKE_CURRENT_BINARY_DIR}/gpu_flaggems_dry)
set_tests_properties(gpu_flaggems_dry PROPERTIES LABELS kernels TIMEOUT 600
  ENVIRONMENT "DMREF_CLI=$<TARGET_FILE:dmref_cli>;TRITON_INTERPRET=1;PYTHONDONTWRITEBYTECODE=1")

# examples/cuda: the mHC pre kernel's host build, run through dmref run / verify
# (cuda_example), and its CUDA build by nvcc (cuda_example_nvcc; run on the GPU
# too when configured with DMREF_CUDA_RUN=1 on a machine that has one).
add_executable(mhc_harness ${PROJECT_SOURCE_DIR}/examples/cuda/harness.cpp)
target_include_directories(mhc_harness PRIVATE ${PROJECT_SOURCE_DIR}/examples/cuda)
target_link_libraries(mhc_harness PRIVATE dmref_io)
add_test(NAME cuda_example COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/examples/cuda/run_example.py
         --harness $<TARGET_FILE:mhc_harness> --dmref $<TARGET_FILE:dmref_cli> --work ${CMAKE_CURRENT_BINARY_DIR}/cuda_example
         --doc ${PROJECT_SOURCE_DIR}/docs/kernels.md)
set_tests_properties(cuda_example PROPERTIES LABELS examples TIMEOUT 300)
# The same on two machines (docs/kernels.md, "On a GPU"): capture + certify, the harness alone,
# judge, each a --stage over one folder; here all three on this machine with the host build.
add_test(NAME cuda_example_stages COMMAND sh -c "rm -rf stages && mkdir stages && \
  /usr/bin/python3 ${PROJECT_SOURCE_DIR}/examples/cuda/run_example.py --stage capture --dmref $<TARGET_FILE:dmref_cli> --work stages && \
  /usr/bin/python3 ${PROJECT_SOURCE_DIR}/examples/cuda/run_example.py --stage harness --harness $<TARGET_FILE:mhc_harness> --work stages && \
  /usr/bin/python3 ${PROJECT_SOURCE_DIR}/examples/cuda/run_example.py --stage judge --dmref $<TARGET_FILE:dmref_cli> --work stages"
  WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(cuda_example_stages PROPERTIES LABELS examples TIMEOUT 300)
find_program(DMREF_NVCC nvcc HINTS /usr/local/cuda/bin)
if(DMREF_NVCC AND CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  # nvcc links the GPU harness against dmref_io, which a sanitized build instruments
  message(STATUS "dmref: sanitized build: the nvcc build of examples/cuda is not tested here")
elseif(DMREF_NVCC)
  add_test(NAME cuda_example_nvcc
           COMMAND ${CMAKE_COMMAND} -DNVCC=${DMREF_NVCC} -DSRC=${PROJECT_SOURCE_DIR}/examples/cuda
                   -DINC=${PROJECT_SOURCE_DIR}/reference/include -DIO_LIB=$<TARGET_FILE:dmref_io>
                   -DOUT=${CMAKE_CURRENT_BINARY_DIR}/cuda_example_nvcc -DRUN_ON_GPU=$ENV{DMREF_CUDA_RUN}
                   -DDMREF=$<TARGET_FILE:dmref_cli> -DPYTHON=/usr/bin/python3
                   -P ${PROJECT_SOURCE_DIR}/examples/cuda/nvcc_build.cmake)
  set_tests_properties(cuda_example_nvcc PROPERTIES LABELS examples TIMEOUT 600)
else()
  message(STATUS "dmref: nvcc not found: examples/cuda is tested on the host build only (CTest cuda_example)")
endif()
# - faithful: correct implementations of every scheme (tests/faithful, PyTorch) that differ in
#   what real kernels legitimately differ in, judged on the committed corpus at every dtype,
#   forward and gradient; fails on any reject and if the tables of docs/fixtures.md
#   "Faithful variants" are stale (about 45 s of one core; SKIP without python3-torch).
add_test(NAME faithful
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/faithful/run.py
                 --fixtures ${PROJECT_SOURCE_DIR}/fixtures/golden --json ${CMAKE_CURRENT_BINARY_DIR}/faithful.json
                 --check-docs ${PROJECT_SOURCE_DIR}/docs/fixtures.md)
set_tests_properties(faithful PROPERTIES LABELS python TIMEOUT 900 COST 112 SKIP_RETURN_CODE 77
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1" FIXTURES_SETUP two_sided_results)
# - two_sided: the gate's two-sided score (docs/fixtures.md "Two-sided score"): merges the JSON of
#   CTest mutants and faithful (required as fixtures: run first, once) into the table and fails
#   unless every mutant is killed, every faithful variant passes and the table is current (< 1 s;
#   SKIP where faithful skips).
add_test(NAME two_sided
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/two_sided.py
                 --mutants ${CMAKE_CURRENT_BINARY_DIR}/mutants/mutants.json --faithful ${CMAKE_CURRENT_BINARY_DIR}/faithful.json
                 --check ${PROJECT_SOURCE_DIR}/docs/fixtures.md)
set_tests_properties(two_sided PROPERTIES LABELS python TIMEOUT 60 SKIP_RETURN_CODE 77
  FIXTURES_REQUIRED two_sided_results ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
# - faithful_captures: the random-capture study (bench/faithful_captures.py) end to end on its first
#   six captures (draw, certify with dmref run, judge three variants); fails if a capture is not
#   certified, nothing was judged or a variant is rejected (about 5 s). The 6,000-capture study
#   (docs/fixtures.md "Random-capture study") is a bench run, not a CTest.
add_test(NAME faithful_captures
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/bench/faithful_captures.py --captures 6
                 --variants natural,pairwise,fma --cli $<TARGET_FILE:dmref_cli>)
set_tests_properties(faithful_captures PROPERTIES LABELS python TIMEOUT 300 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
