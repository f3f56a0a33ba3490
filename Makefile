# pgbus_stream — PGXS build. The version comes from pgbus_stream.control only.
EXTENSION   = pgbus_stream
EXTVERSION  = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)
MODULE_big  = pgbus_stream
# The current install script, the frozen scripts of earlier versions and the
# upgrade scripts between them.
DATA        = $(wildcard sql/$(EXTENSION)--*.sql)

SRCS = src/pgbus_stream.cpp \
       $(wildcard src/shmem/*.cpp src/capture/*.cpp src/worker/*.cpp src/sql/*.cpp src/pg/*.cpp) \
       $(wildcard src/core/*.cpp src/http/*.cpp)
OBJS = $(SRCS:.cpp=.o)

REGRESS      = $(patsubst sql/%.sql,%,$(filter-out sql/$(EXTENSION)--%,$(wildcard sql/*.sql)))
REGRESS_OPTS = --temp-config=$(srcdir)/test/regress.conf --temp-instance=$(CURDIR)/tmp_check_regress

PG_CONFIG ?= pg_config
PG_CPPFLAGS = -Isrc $(shell pkg-config --cflags libmicrohttpd)
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Wno-register -Wno-unused-parameter -Wno-missing-field-initializers $(WERROR)
SHLIB_LINK  = $(shell pkg-config --libs libmicrohttpd) -lcrypto -lstdc++
EXTRA_CLEAN = tmp_check_regress results regression.diffs regression.out

# Track header dependencies (.deps/); no LLVM bitcode for C++ sources.
override autodepend = yes
override with_llvm = no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# C++ flags: PGXS's CXXFLAGS carry C-only warnings; keep ours.
override CXXFLAGS := -O2 -g -fPIC $(PG_CXXFLAGS)
