# Where the config file and the systemd unit go for an install under a
# prefix. One rule, used twice so the two cannot disagree:
#
#  - at configure time (packaging/CMakeLists.txt) with CMAKE_INSTALL_PREFIX,
#    for the paths built into files: the config file isoprof looks for
#    (agent/cli), the unit's ExecStart and the man pages;
#  - at install time (the install(CODE) there) with the prefix that
#    `cmake --install --prefix` or CPack gives, for where the files go. So
#    `cmake --install build --prefix ~/.local` stays in ~/.local even when
#    build/ was configured for /usr, as the .deb's is.
#
#   isoprof_dirs(<prefix> <sysconfdir> <unitdir> <conf-var> <unit-var>)
#
# <conf-var> is set to the directory of the config file: GNUInstallDirs'
# SYSCONFDIR made absolute for <prefix> (<prefix>/etc, but /etc for the
# prefixes / and /usr and /etc/opt/X for /opt/X; an absolute
# CMAKE_INSTALL_SYSCONFDIR as given), plus /isoprof. <sysconfdir> is the
# configured CMAKE_INSTALL_SYSCONFDIR. <unit-var> is set to the unit's
# directory: <unitdir> (pkg-config systemd's systemdsystemunitdir, looked up
# at configure time) when <prefix> is /usr, else <prefix>/lib/systemd/system,
# which systemd also reads for /usr/local.
cmake_minimum_required(VERSION 3.18)

function(isoprof_dirs prefix sysconfdir unitdir conf_var unit_var)
  if(NOT COMMAND GNUInstallDirs_get_absolute_install_dir)
    # At install time, where no language is enabled: GNUInstallDirs would
    # warn that it cannot choose a LIBDIR, which nothing here uses.
    set(CMAKE_INSTALL_LIBDIR lib)
    include(GNUInstallDirs)
  endif()
  set(CMAKE_INSTALL_PREFIX "${prefix}")
  set(rel "${sysconfdir}")
  GNUInstallDirs_get_absolute_install_dir(conf rel SYSCONFDIR)
  if(prefix MATCHES "^/usr/?$")
    set(unit "${unitdir}")
  else()
    string(REGEX REPLACE "/$" "" p "${prefix}")
    set(unit "${p}/lib/systemd/system")
  endif()
  set(${conf_var} "${conf}/isoprof" PARENT_SCOPE)
  set(${unit_var} "${unit}" PARENT_SCOPE)
endfunction()
