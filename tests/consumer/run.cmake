# CTest driver (tests/extra.cmake): install dmref from the build tree into a
# fresh temporary prefix, configure and build tests/consumer against it with
# find_package(dmref), and run its tests.
#   cmake -DDMREF_BUILD=<dmref build dir> -DWORK=<scratch dir> -DSOURCE=<tests/consumer> -P run.cmake
foreach(v DMREF_BUILD WORK SOURCE)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run.cmake: -D${v}=... is required")
  endif()
endforeach()
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer: failed (${rc}): ${ARGN}")
  endif()
endfunction()
file(REMOVE_RECURSE ${WORK})
step(${CMAKE_COMMAND} --install ${DMREF_BUILD} --prefix ${WORK}/prefix)
step(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${WORK}/build)
step(${CMAKE_CTEST_COMMAND} --test-dir ${WORK}/build --output-on-failure)
