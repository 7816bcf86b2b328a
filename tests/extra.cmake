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
# The "What a PASS rules out" table of docs/fixtures.md is the committed
# corpus's: regenerated from fixtures/golden and compared (scripts/tolerance_table.py).
add_test(NAME tolerance_table
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/tolerance_table.py ${PROJECT_SOURCE_DIR}/fixtures/golden
                 --check ${PROJECT_SOURCE_DIR}/docs/fixtures.md)
set_tests_properties(tolerance_table PROPERTIES LABELS docs ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
