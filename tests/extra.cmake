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
  add_test(NAME pip_install COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/pip_install.sh ${PROJECT_SOURCE_DIR} ${DMREF_VENV}
                                    ${CMAKE_CURRENT_BINARY_DIR}/pip_install)
  set_tests_properties(pip_install PROPERTIES LABELS install TIMEOUT 3600)
endif()
# The "What a PASS rules out" table of docs/fixtures.md is the committed
# corpus's: regenerated from fixtures/golden and compared (scripts/tolerance_table.py).
add_test(NAME tolerance_table
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/tolerance_table.py ${PROJECT_SOURCE_DIR}/fixtures/golden
                 --check ${PROJECT_SOURCE_DIR}/docs/fixtures.md)
set_tests_properties(tolerance_table PROPERTIES LABELS docs ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
