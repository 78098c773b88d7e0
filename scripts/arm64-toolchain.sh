#!/usr/bin/env bash
# The toolchain that builds and starts the arm64 (Graviton) artifacts, Lambda's default architecture in
# template.yaml. Two ways, chosen in this order:
#   rustup  - the active rustup toolchain has the aarch64-unknown-linux-gnu target (a machine with
#             internet: `rustup target add aarch64-unknown-linux-gnu`). `sam build` then links with
#             cargo-lambda's Zig as it does for any user; nothing else is needed to build.
#   debian  - otherwise (a machine that reaches only the package registries, as CI here: rustup cannot
#             fetch targets, Debian's archive is reachable): Debian's rustc-web/cargo-web with its
#             aarch64 standard library, linked by Debian's aarch64 cross gcc against glibc 2.36's cross
#             libraries. Lambda's provided.al2023 has glibc 2.34: scripts/artifact-check.py fails any
#             artifact that needs a newer symbol (today's need at most GLIBC_2.34).
# On a host that is not aarch64 the artifacts are started under qemu-user with Debian's aarch64 glibc
# (the runner); both ways install it.
#
# Usage: scripts/arm64-toolchain.sh exec CMD...  installs what is missing (apt-get, as root), then runs
#                                                CMD with the build environment of the chosen way
#                                                (e.g. `exec scripts/sam.sh build ...`)
#        scripts/arm64-toolchain.sh runner       installs the runner if needed, prints the command that
#                                                starts an aarch64 binary here (empty on aarch64)
#        scripts/arm64-toolchain.sh which        prints `rustup` or `debian`; installs nothing
# Env:   TURNSTILE_ARM64_TOOLCHAIN=rustup|debian forces one way.
set -euo pipefail

TARGET=aarch64-unknown-linux-gnu
# Upstream versions pinned; Debian's revision floats so security updates still install.
RUST_WEB_VERSION="${RUST_WEB_VERSION:-1.96.0+dfsg1-*}"
CROSS_GCC_VERSION="${CROSS_GCC_VERSION:-4:12.2.0-*}"
CROSS_LIBC_VERSION="${CROSS_LIBC_VERSION:-2.36-*}"
CROSS_GCC_LIB_VERSION="${CROSS_GCC_LIB_VERSION:-12.2.0-*}"
QEMU_VERSION="${QEMU_VERSION:-1:7.2+dfsg-*}"
SYSROOT=/usr/aarch64-linux-gnu

say() { echo "arm64-toolchain: $*" >&2; }

which_way() {
    case "${TURNSTILE_ARM64_TOOLCHAIN:-}" in
        rustup | debian) echo "$TURNSTILE_ARM64_TOOLCHAIN"; return ;;
        "") ;;
        *) say "TURNSTILE_ARM64_TOOLCHAIN must be rustup or debian, not '$TURNSTILE_ARM64_TOOLCHAIN'"; exit 2 ;;
    esac
    if command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
        echo rustup
    else
        echo debian
    fi
}

# apt-get install of "name=version" specs, only for packages not installed at a matching version.
apt_install() {
    local missing=() spec name version have
    for spec in "$@"; do
        name="${spec%%=*}"
        version="${spec#*=}"
        have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
        # shellcheck disable=SC2053 # the version is a glob on purpose
        if [[ "$have" != "install ok installed "* ]] || [[ "${have#install ok installed }" != $version ]]; then
            missing+=("$spec")
        fi
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "missing Debian packages: ${missing[*]}"
        say "install them as root with apt-get (or add the rustup target: rustup target add $TARGET)"
        exit 1
    fi
    say "installing ${missing[*]} (apt-get)"
    local apt=(apt-get -o DPkg::Lock::Timeout=900 -qq)
    if [[ " ${missing[*]} " == *":arm64="* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
        say "adding Debian's arm64 architecture (dpkg --add-architecture arm64)"
        dpkg --add-architecture arm64
    fi
    "${apt[@]}" update >&2
    # --no-remove: never take a package away to make room (e.g. Debian's older `rustc`); stop instead.
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y --no-remove --no-install-recommends "${missing[@]}" >&2
}

way=$(which_way)
cmd="${1:-}"
[ $# -eq 0 ] || shift
runner=()
# The guest's libraries come from the cross sysroot, named on LD_LIBRARY_PATH too: with Debian's
# arm64 architecture added, /etc/ld.so.cache also lists the multiarch libc6:arm64, and the sysroot's
# loader with that (different build's) libc hangs in the first pthread_create.
[ "$(uname -m)" = aarch64 ] || runner=(qemu-aarch64 -L "$SYSROOT" -E "LD_LIBRARY_PATH=$SYSROOT/lib")
case "$cmd" in
    which)
        echo "$way"
        ;;
    runner)
        [ ${#runner[@]} -eq 0 ] || apt_install "qemu-user=$QEMU_VERSION" "libc6-arm64-cross=$CROSS_LIBC_VERSION" \
            "libgcc-s1-arm64-cross=$CROSS_GCC_LIB_VERSION"
        echo "${runner[*]}"
        ;;
    exec)
        [ $# -gt 0 ] || { echo "usage: $0 exec CMD..." >&2; exit 2; }
        if [ "$way" = rustup ]; then
            say "building with rustup's $TARGET target (cargo-lambda links with Zig)"
            exec "$@"
        fi
        apt_install "rustc-web=$RUST_WEB_VERSION" "cargo-web=$RUST_WEB_VERSION" \
            "libstd-rust-web-dev:arm64=$RUST_WEB_VERSION" \
            "gcc-aarch64-linux-gnu=$CROSS_GCC_VERSION" "libc6-dev-arm64-cross=$CROSS_LIBC_VERSION"
        # Debian's cargo and rustc first on PATH (SAM and cargo-lambda call `cargo` by name), without
        # moving anything else: a directory of three links, under .tools/ (ignored by git).
        bin="$(cd "$(dirname "$0")/.." && pwd)/.tools/arm64-debian/bin"
        mkdir -p "$bin"
        ln -sf /usr/bin/cargo "$bin/cargo"
        ln -sf /usr/bin/rustc "$bin/rustc"
        ln -sf /usr/bin/rustdoc "$bin/rustdoc"
        export PATH="$bin:$PATH" RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
        # cargo-lambda's plain-cargo backend: the same `cargo build --release --target ... --bin <fn>`
        # with its release settings and target-cpu, linked by the cross gcc instead of Zig.
        export CARGO_LAMBDA_COMPILER=cargo
        export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
        export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
        say "building with Debian's $(rustc --version) and aarch64-linux-gnu-gcc $(aarch64-linux-gnu-gcc -dumpversion) (cargo-lambda --compiler cargo)"
        exec "$@"
        ;;
    *)
        echo "usage: $0 exec CMD... | runner | which" >&2
        exit 2
        ;;
esac
