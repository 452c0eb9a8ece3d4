# CPACK_PROJECT_CONFIG_FILE of the .deb (packaging/CMakeLists.txt): the
# package installs under /usr, and the paths built into it (the config
# isoprof reads, the unit's ExecStart) are right only when the tree was
# configured for /usr too. packaging/deb/build.sh configures it so.
if(CPACK_GENERATOR STREQUAL "DEB" AND
   NOT CPACK_ISOPROF_CONFIGURED_PREFIX STREQUAL CPACK_PACKAGING_INSTALL_PREFIX)
  message(FATAL_ERROR
    "the .deb installs under ${CPACK_PACKAGING_INSTALL_PREFIX}, but this tree was configured "
    "with CMAKE_INSTALL_PREFIX=${CPACK_ISOPROF_CONFIGURED_PREFIX}: configure it with "
    "-DCMAKE_INSTALL_PREFIX=${CPACK_PACKAGING_INSTALL_PREFIX} (packaging/deb/build.sh does)")
endif()
