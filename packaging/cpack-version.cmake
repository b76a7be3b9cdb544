# CPACK_PROJECT_CONFIG_FILE: runs at cpack time. The packages' version is the version baked into
# the binaries (cmake/version.cmake wrote it into the build's header; `--version` prints it),
# turned into a Debian version that sorts the way releases do:
#   v0.2.0 / 0.2.0              -> 0.2.0
#   v0.2.0-3-gabc1234           -> 0.2.0+3.gabc1234   (3 commits after the tag: above it)
#   0.1.0-gabc1234              -> 0.1.0~gabc1234     (no tag yet: below 0.1.0)
#   0.1.0-unknown               -> 0.1.0~unknown      (a tree without .git)
#   any of them with -dirty     -> the same with +dirty at the end
#   anything else (SHOAL_VERSION=1.2.3-1 ...): kept, characters Debian does not allow become
#   '.', and a version not starting with a digit is put after "0~".
# Untagged builds compare by commit hash among themselves: tag releases for upgrades that order.
# tests/install/packages_test.py writes the same rule again and checks the packages against it.
if(NOT EXISTS "${CPACK_SHOAL_VERSION_HEADER}")
  message(FATAL_ERROR "cpack: ${CPACK_SHOAL_VERSION_HEADER} is missing: build first")
endif()
file(STRINGS "${CPACK_SHOAL_VERSION_HEADER}" line REGEX "#define SHOAL_BUILD_VERSION ")
string(REGEX REPLACE ".*SHOAL_BUILD_VERSION \"([^\"]*)\".*" "\\1" built "${line}")
string(REGEX REPLACE "^v([0-9])" "\\1" v "${built}")
set(dirty "")
if(v MATCHES "^(.*)-dirty$")
  set(v "${CMAKE_MATCH_1}")
  set(dirty "+dirty")
endif()
if(v MATCHES "^([0-9][0-9.]*)-([0-9]+)-g([0-9a-f]+)$")
  set(v "${CMAKE_MATCH_1}+${CMAKE_MATCH_2}.g${CMAKE_MATCH_3}")
elseif(v MATCHES "^([0-9][0-9.]*)-g([0-9a-f]+)$")
  set(v "${CMAKE_MATCH_1}~g${CMAKE_MATCH_2}")
elseif(v MATCHES "^([0-9][0-9.]*)-unknown$")
  set(v "${CMAKE_MATCH_1}~unknown")
else()
  string(REGEX REPLACE "[^A-Za-z0-9.+~-]" "." v "${v}")
  if(NOT v MATCHES "^[0-9]")
    set(v "0~${v}")
  endif()
endif()
string(APPEND v "${dirty}")
set(CPACK_PACKAGE_VERSION "${v}")
set(CPACK_DEBIAN_PACKAGE_VERSION "${v}")
