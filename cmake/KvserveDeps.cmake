# Finds every third-party dependency. All come from Debian 12 packages
# (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(GTest CONFIG REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# Block checksums and the session cache's digests (xxHash's XXH3).
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# Unicode character properties for the BPE pre-tokenizers (libicu-dev).
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
if(KVSERVE_BACKENDS_ONLY)
  return()  # what common/, model/ and backends/ need (CMakeLists.txt)
endif()
find_package(Protobuf REQUIRED)
find_package(benchmark CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
# Debian's gRPC ships no usable CMake config: use pkg-config.
pkg_check_modules(GRPCPP REQUIRED IMPORTED_TARGET grpc++)
# The /metrics HTTP endpoint (GNU libmicrohttpd).
pkg_check_modules(MICROHTTPD REQUIRED IMPORTED_TARGET libmicrohttpd)
# JSON of the OpenAI-compatible HTTP API (nlohmann-json3-dev, header-only).
find_package(nlohmann_json 3 CONFIG REQUIRED)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
# The session cache service's Redis backend.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
# kvserve-cli bench --protocol http: the HTTP client (libcurl4-openssl-dev).
pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl)
