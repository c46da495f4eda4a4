# Finds Kokkos as Debian packages it (libtrilinos-kokkos-dev) and defines Kokkos::kokkoscore.
# Debian's own CMake package file points its include directory at /usr/lib/include, which does not
# exist, so this module looks for the headers and the library directly.
find_path(TrilinosKokkos_INCLUDE_DIR NAMES Kokkos_Core.hpp PATHS /usr/include/trilinos)
find_library(TrilinosKokkos_LIBRARY NAMES trilinos_kokkoscore kokkoscore)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(TrilinosKokkos
  REQUIRED_VARS TrilinosKokkos_LIBRARY TrilinosKokkos_INCLUDE_DIR)
if(TrilinosKokkos_FOUND AND NOT TARGET Kokkos::kokkoscore)
  add_library(Kokkos::kokkoscore UNKNOWN IMPORTED)
  set_target_properties(Kokkos::kokkoscore PROPERTIES
    IMPORTED_LOCATION "${TrilinosKokkos_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${TrilinosKokkos_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}")
endif()
