# `cmake --install build [--prefix DIR]`: the public headers, libencore.a, the `encore` CLI, and two ways for
# other projects to use them:
#   CMake:      find_package(encore CONFIG REQUIRED) + target_link_libraries(app PRIVATE encore::encore)
#   pkg-config: pkg-config --cflags --libs encore
# libencore.a is static, so its dependencies (OpenMP, oneDNN, utf8proc, Oniguruma) are part of its link interface:
# encoreConfig.cmake finds them again with find_dependency, encore.pc lists them in Libs.
include(CMakePackageConfigHelpers)

set(ENCORE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/encore)

install(TARGETS encore EXPORT encoreTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/encore DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(ENCORE_BUILD_CLI)
  install(TARGETS encore_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT encoreTargets NAMESPACE encore:: DESTINATION ${ENCORE_CMAKE_DIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/encoreConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/encoreConfig.cmake INSTALL_DESTINATION ${ENCORE_CMAKE_DIR})
# 0.x: a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/encoreConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/encoreConfig.cmake ${PROJECT_BINARY_DIR}/encoreConfigVersion.cmake
        DESTINATION ${ENCORE_CMAKE_DIR})

# pkg-config: Libs carries what the static library needs (a plain `pkg-config --libs encore` links).
get_target_property(_encore_dnnl_lib DNNL::dnnl LOCATION)
get_filename_component(_encore_dnnl_dir ${_encore_dnnl_lib} DIRECTORY)
string(JOIN " " ENCORE_PC_LIBS -L${_encore_dnnl_dir} -ldnnl ${UTF8PROC_LDFLAGS} ${ONIG_LDFLAGS} ${OpenMP_CXX_FLAGS})
file(RELATIVE_PATH ENCORE_PC_PREFIX_FROM_PCDIR /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" ENCORE_PC_PREFIX_FROM_PCDIR "${ENCORE_PC_PREFIX_FROM_PCDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/encore.pc.in ${PROJECT_BINARY_DIR}/encore.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/encore.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
