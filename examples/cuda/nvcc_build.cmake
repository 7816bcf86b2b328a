# CTest cuda_example_nvcc (docs/kernels.md, "A CUDA example"): compile the CUDA
# kernels with nvcc and link the GPU harness (no GPU needed to build). With
# RUN_ON_GPU set (a machine with a GPU: DMREF_CUDA_RUN=1 at configure time),
# also run run_example.py on the GPU build (--device cuda).
# -DNVCC= -DSRC= (examples/cuda) -DINC= (reference/include) -DIO_LIB= -DOUT= [-DRUN_ON_GPU=1 -DDMREF= -DPYTHON=]
file(MAKE_DIRECTORY "${OUT}")
macro(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}")
  endif()
endmacro()
run("${NVCC}" -std=c++17 -O2 -c "${SRC}/mhc_pre.cu" -o "${OUT}/mhc_pre.o")
run("${NVCC}" -std=c++20 -O2 -DMHC_EXAMPLE_CUDA -I${INC} -I${SRC} "${SRC}/harness.cpp" "${OUT}/mhc_pre.o" "${IO_LIB}"
    -o "${OUT}/mhc_harness_cuda")
message(STATUS "nvcc: built ${OUT}/mhc_harness_cuda")
if(RUN_ON_GPU)
  run("${PYTHON}" "${SRC}/run_example.py" --harness "${OUT}/mhc_harness_cuda" --dmref "${DMREF}" --device cuda
      --work "${OUT}/run")
endif()
