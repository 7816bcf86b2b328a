# Ecosystem tests (included from tests/CMakeLists.txt):
# - python: the dmref_fixtures package (python/) with pytest, including its
#   agreement with `dmref verify` on a shared candidate set;
# - consumer: install into a temporary prefix and build a find_package(dmref)
#   project against it (tests/consumer/).
add_test(NAME python
         COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python)
set_tests_properties(python PROPERTIES LABELS python TIMEOUT 600
  ENVIRONMENT "DMREF_CLI=$<TARGET_FILE:dmref_cli>;DMREF_REQUIRE_CLI=1;DMREF_FIXTURES=${PROJECT_SOURCE_DIR}/fixtures/golden;PYTHONDONTWRITEBYTECODE=1")
add_test(NAME consumer
         COMMAND ${CMAKE_COMMAND} -DDMREF_BUILD=${PROJECT_BINARY_DIR} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/consumer
                 -DSOURCE=${CMAKE_CURRENT_SOURCE_DIR}/consumer -P ${CMAKE_CURRENT_SOURCE_DIR}/consumer/run.cmake)
set_tests_properties(consumer PROPERTIES LABELS install TIMEOUT 1200)
# - faithful: correct implementations of every scheme (tests/faithful, PyTorch) that differ in
#   what real kernels legitimately differ in, judged on the committed corpus at every dtype,
#   forward and gradient; fails on any reject and if the tables of docs/fixtures.md
#   "Faithful variants" are stale (about 45 s of one core; SKIP without python3-torch).
add_test(NAME faithful
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/faithful/run.py
                 --fixtures ${PROJECT_SOURCE_DIR}/fixtures/golden --json ${CMAKE_CURRENT_BINARY_DIR}/faithful.json
                 --check-docs ${PROJECT_SOURCE_DIR}/docs/fixtures.md)
set_tests_properties(faithful PROPERTIES LABELS python TIMEOUT 900 SKIP_RETURN_CODE 77
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
# - faithful_captures: the random-capture study (bench/faithful_captures.py) end to end on six
#   small captures (draw, certify with dmref run, judge three variants); it measures false
#   rejects and fails only if a capture is not certified or nothing was judged (a few seconds).
add_test(NAME faithful_captures
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/bench/faithful_captures.py --captures 6 --no-large
                 --variants natural,pairwise,fma --cli $<TARGET_FILE:dmref_cli>)
set_tests_properties(faithful_captures PROPERTIES LABELS python TIMEOUT 300 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
