// encore's version: the one place it is written. CMakeLists.txt reads it for project(encore VERSION ...) (and so
// the CMake package's version file and encore.pc), pyproject.toml for the wheel; encore.__version__ and
// `encore --version` print it.
#pragma once

#define ENCORE_VERSION_STRING "0.1.0"
