# The shared libraries a LibTorch wheel ships (NCCL, cuDNN, cuBLAS, ... in
# site-packages/nvidia/*/lib) are the ones it was built against: the linker must find those before
# older copies in the CUDA toolkit's directory (libtorch_cuda of LibTorch 2.15 needs a newer NCCL
# than CUDA 13.0's). At run time libtorch_cuda's own RPATH finds them. Used by hotpath's build and
# by its installed package config (for programs that link hotpath::hotpath).
#
# hotpath_torch_wheel_link_option(<out>): "LINKER:-rpath-link,<dirs>", or empty for a LibTorch
# that is no wheel. Needs TORCH_INSTALL_PREFIX (find_package(Torch) sets it).
function(hotpath_torch_wheel_link_option out)
  file(GLOB dirs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  set(option "")
  if(dirs)
    list(JOIN dirs ":" path)
    set(option "LINKER:-rpath-link,${path}")
  endif()
  set(${out} "${option}" PARENT_SCOPE)
endfunction()
