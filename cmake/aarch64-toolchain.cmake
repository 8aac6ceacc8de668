# Cross-compiling for AArch64 Linux on a Debian host: Debian's g++-aarch64-linux-gnu and
# the arm64 multiarch libraries under /usr/lib/aarch64-linux-gnu (dpkg
# --add-architecture arm64; scripts/test-aarch64.sh installs what the backends need).
# The binaries run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR, so ctest runs them
# there too).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
# Headers and libraries from the multiarch paths, programs from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
