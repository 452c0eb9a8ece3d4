# Build-time generation of the packaged files that come from the config
# table, so they never drift from the code (run by packaging/CMakeLists.txt):
#
#   cmake -DMODE=config -DISOPROFD=<isoprofd> -DOUT=<isoprof.yaml> -DCONF=<path> -P gen.cmake
#     isoprofd --print-config with store.path set to /var/lib/isoprof, checked
#     with isoprofd --check-config; its header names the file as CONF, where
#     the install puts it.
#   cmake -DMODE=man5 -DISOPROFD=<isoprofd> -DIN=<isoprof.yaml.5.in>
#         -DAWK=<awk> -DSCRIPT=<options.awk> -DVERSION=<v> -DCONF=<path>
#         -DOUT=<isoprof.yaml.5> -P gen.cmake
#     the man page's OPTIONS section from isoprofd --help's option table.
#
# Each writes OUT only when its content changes.
cmake_minimum_required(VERSION 3.18)

function(write_if_changed path content)
  if(EXISTS "${path}")
    file(READ "${path}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}.tmp" "${content}")
  file(RENAME "${path}.tmp" "${path}")
endfunction()

if(MODE STREQUAL "config")
  execute_process(COMMAND "${ISOPROFD}" --print-config
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ISOPROFD} --print-config failed (${rc}): ${err}")
  endif()
  # The one line the package changes: the store goes to the service's
  # StateDirectory. An exact match, so a changed default fails the build
  # here instead of shipping a config that stores in the wrong place.
  string(FIND "${out}" "\n  path: ./isoprof-data\n" at)
  string(FIND "${out}" "\nstore:\n" store_at)
  if(at EQUAL -1 OR store_at EQUAL -1 OR at LESS store_at)
    message(FATAL_ERROR "isoprofd --print-config has no '  path: ./isoprof-data' line under "
                        "'store:'; update packaging/gen.cmake")
  endif()
  string(REPLACE "\n  path: ./isoprof-data\n" "\n  path: /var/lib/isoprof\n" out "${out}")
  set(head
"# ${CONF}: the configuration isoprof.service runs isoprofd
# with. Edit `targets` to name the runtimes' inspector endpoints, then
# `systemctl reload isoprof`; options marked \"needs a restart\" take
# `systemctl restart isoprof`. Check an edit with
# `isoprofd --check-config ${CONF}`. See isoprof.yaml(5).
# A conffile: your changes survive upgrades (dpkg asks when the packaged
# default changed as well). Below, every option is at its default but
# store.path, which names the service's StateDirectory.
#
")
  write_if_changed("${OUT}" "${head}${out}")
  execute_process(COMMAND "${ISOPROFD}" --check-config "${OUT}"
    OUTPUT_VARIABLE cout ERROR_VARIABLE cerr RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    file(REMOVE "${OUT}")
    message(FATAL_ERROR "the generated ${OUT} does not pass isoprofd --check-config:\n${cerr}")
  endif()
elseif(MODE STREQUAL "man5")
  execute_process(COMMAND "${ISOPROFD}" --help
    COMMAND "${AWK}" -f "${SCRIPT}"
    OUTPUT_VARIABLE options ERROR_VARIABLE err RESULT_VARIABLE rc)
  # RESULT_VARIABLE holds the last command's status: awk's.
  if(NOT rc EQUAL 0 OR options STREQUAL "")
    message(FATAL_ERROR "turning '${ISOPROFD} --help' into man page entries failed (${rc}): ${err}")
  endif()
  file(READ "${IN}" page)
  string(FIND "${page}" "@OPTIONS@\n" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${IN} has no @OPTIONS@ line")
  endif()
  string(REPLACE "@OPTIONS@\n" "${options}" page "${page}")
  string(REPLACE "@PROJECT_VERSION@" "${VERSION}" page "${page}")
  string(REPLACE "@ISOPROF_CONFIG_FILE@" "${CONF}" page "${page}")
  write_if_changed("${OUT}" "${page}")
else()
  message(FATAL_ERROR "gen.cmake: MODE must be config or man5")
endif()
