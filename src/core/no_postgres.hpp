// Included by every header of the PostgreSQL-free layers (core/, http/).
// They must compile without postgres.h so that they can be unit-tested and
// fuzzed without a server, and so that no elog() can hide in them.
#pragma once
#ifdef PG_VERSION_NUM
#error "core/ and http/ headers must be included before postgres.h (docs/ARCHITECTURE.md, \"C++ inside PostgreSQL\")"
#endif
