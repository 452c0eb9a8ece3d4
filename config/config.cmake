# isoprof_config: the YAML loader (config.h); the option table is options.c.
# May depend on libc, libyaml and isoprof_base only.
add_library(isoprof_config STATIC ${CMAKE_CURRENT_LIST_DIR}/config.c ${CMAKE_CURRENT_LIST_DIR}/value.c
            ${CMAKE_CURRENT_LIST_DIR}/rows.c ${CMAKE_CURRENT_LIST_DIR}/walk.c ${CMAKE_CURRENT_LIST_DIR}/help.c
            ${CMAKE_CURRENT_LIST_DIR}/options.c
            ${CMAKE_CURRENT_LIST_DIR}/upload.c)
target_include_directories(isoprof_config PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(isoprof_config PUBLIC isoprof_base PkgConfig::YAML)
