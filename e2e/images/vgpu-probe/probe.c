/*
 * vgpu-probe: the workload of the end-to-end harness's real-runtime scenario. A CUDA program
 * of the smallest kind, built against vgpu-core's ABI header (no CUDA toolkit): it opens
 * libcuda.so.1 with dlopen as the CUDA runtime does, so in a Tessera container the preloaded
 * hook library answers every call, and prints what it sees, one "probe KEY VALUE..." line each.
 *
 *   vgpu-probe run      the container's program: report, then a process that holds memory on
 *                       device 0 while another fills every device until refused, then report
 *                       again; then a process holds memory again ("probe kept") and it waits for
 *                       SIGTERM, so its maps and the node agent's view can be read from the host
 *   vgpu-probe report   uid, visible UUIDs, cuMemGetInfo per device, device nodes, whether the
 *                       limits file can be opened for writing and its mount's options, where the
 *                       region is (the limits file's TESSERA_SHARED_REGION) and on what filesystem,
 *                       and what a tenant's fallocate of 1 GiB on it gets
 *   vgpu-probe hold [N] allocates N bytes on device 0 (default a third of its limit and 4097 bytes),
 *                       says so, keeps them until stdin closes
 *   vgpu-probe fill     on every device: allocates until refused (chunks halving down to one
 *                       byte), prints the bytes it got and what cuMemGetInfo said first
 *   vgpu-probe attack   a tenant against the node agent's reader: allocates on device 0 (so its
 *                       region exists), replaces the region with a FIFO, says so, and waits for
 *                       SIGTERM
 *   vgpu-probe attack truncate
 *                       a tenant against its own container's accounting: a child holds memory on
 *                       device 0, the region is cut to one page (as if to wipe the counters after
 *                       it), a second child tries to allocate; prints what that child got and
 *                       waits for SIGTERM
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/cuda_abi.h"

#define LIMITS_FILE "/var/run/tessera/limits.env"
#define MAX_CHUNKS 4096

static struct {
    CUresult (*init)(unsigned);
    CUresult (*count)(int *);
    CUresult (*uuid)(CUuuid *, CUdevice);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*current)(CUcontext);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*release)(CUdeviceptr);
    CUresult (*name)(CUresult, const char **);
} cu;

static void die(const char *what)
{
    printf("probe error %s\n", what);
    fflush(stdout);
    exit(1);
}

static const char *err_name(CUresult rc)
{
    const char *s = NULL;
    if (cu.name && cu.name(rc, &s) == CUDA_SUCCESS && s)
        return s;
    return rc == CUDA_SUCCESS ? "CUDA_SUCCESS" : rc == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR";
}

/* Opens the driver as the CUDA runtime does and initialises it; returns the device count. */
static int open_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        printf("probe error dlopen libcuda.so.1: %s\n", dlerror());
        exit(1);
    }
#define SYM(field, sym)                                    \
    if (!(*(void **)&cu.field = dlsym(h, sym)))            \
        die("the driver lacks " sym);
    SYM(init, "cuInit") SYM(count, "cuDeviceGetCount") SYM(uuid, "cuDeviceGetUuid")
    SYM(retain, "cuDevicePrimaryCtxRetain") SYM(current, "cuCtxSetCurrent") SYM(info, "cuMemGetInfo_v2")
    SYM(alloc, "cuMemAlloc_v2") SYM(release, "cuMemFree_v2")
#undef SYM
    *(void **)&cu.name = dlsym(h, "cuGetErrorName");
    CUresult rc = cu.init(0);
    if (rc != CUDA_SUCCESS) {
        printf("probe error cuInit %s\n", err_name(rc));
        exit(1);
    }
    int n = 0;
    if (cu.count(&n) != CUDA_SUCCESS)
        die("cuDeviceGetCount");
    return n;
}

static void use_device(int d)
{
    CUcontext ctx;
    CUresult rc = cu.retain(&ctx, d);
    if (rc == CUDA_SUCCESS)
        rc = cu.current(ctx);
    if (rc != CUDA_SUCCESS) {
        printf("probe error context on device %d: %s\n", d, err_name(rc));
        exit(1);
    }
}

static void uuid_string(int d, char *out, size_t len)
{
    CUuuid u;
    if (cu.uuid(&u, d) != CUDA_SUCCESS) {
        snprintf(out, len, "unknown");
        return;
    }
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* The options of the mount at path ("ro,nosuid,..."), from /proc/self/mountinfo; "none". */
static const char *mount_options(const char *path)
{
    static char opts[256];
    snprintf(opts, sizeof opts, "none");
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096], point[4096], o[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%*s %*s %*s %*s %4095s %255s", point, o) == 2 && strcmp(point, path) == 0)
            snprintf(opts, sizeof opts, "%s", o); /* the last mount there is the one seen */
    if (f)
        fclose(f);
    return opts;
}

/* The filesystem type of the mount holding path (the longest mount point that prefixes it). */
static const char *mount_fstype(const char *path)
{
    static char type[64];
    snprintf(type, sizeof type, "none");
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096], point[4096];
    size_t best = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *sep = strstr(line, " - ");
        size_t n;
        if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1)
            continue;
        n = strlen(point);
        if (strncmp(path, point, n) != 0 || (path[n] != '/' && path[n] != '\0' && strcmp(point, "/") != 0) || n < best)
            continue;
        best = n;
        sscanf(sep + 3, "%63s", type);
    }
    if (f)
        fclose(f);
    return type;
}

/* The region path the limits file names, "" when it names none. */
static const char *region_path(void)
{
    static char path[4096];
    path[0] = '\0';
    FILE *f = fopen(LIMITS_FILE, "re");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "TESSERA_SHARED_REGION=", 22) == 0) {
            snprintf(path, sizeof path, "%s", line + 22);
            path[strcspn(path, "\n")] = '\0';
        }
    if (f)
        fclose(f);
    return path;
}

/* What a tenant gets trying to grow its region by 1 GiB: "allowed" or the error's name. */
static const char *grow_region(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return strerrorname_np(errno);
    int rc = posix_fallocate(fd, 0, (off_t)1 << 30);
    close(fd);
    return rc == 0 ? "allowed" : strerrorname_np(rc);
}

static int report(void)
{
    printf("probe uid %d\n", (int)getuid());
    int n = open_driver();
    char line[4096] = "", u[64];
    for (int d = 0; d < n; d++) {
        uuid_string(d, u, sizeof u);
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", d ? "," : "", u);
    }
    printf("probe uuids %s\n", n ? line : "none");
    for (int d = 0; d < n; d++) {
        size_t free = 0, total = 0;
        use_device(d);
        CUresult rc = cu.info(&free, &total);
        uuid_string(d, u, sizeof u);
        printf("probe meminfo %d %s %zu %zu %s\n", d, u, free, total, err_name(rc));
    }
    line[0] = '\0';
    DIR *dev = opendir("/dev");
    for (struct dirent *e; dev && (e = readdir(dev));)
        if (strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' && e->d_name[6] <= '9')
            snprintf(line + strlen(line), sizeof line - strlen(line), " /dev/%s", e->d_name);
    if (dev)
        closedir(dev);
    printf("probe devices%s\n", line[0] ? line : " none");
    int fd = open(LIMITS_FILE, O_WRONLY);
    printf("probe limits-write %s\n", fd >= 0 ? "allowed" : strerrorname_np(errno));
    if (fd >= 0)
        close(fd);
    printf("probe limits-mount %s\n", mount_options(LIMITS_FILE));
    const char *region = region_path();
    if (region[0]) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", region);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir)
            *slash = '\0';
        printf("probe region %s %s\n", region, mount_fstype(dir));
        printf("probe region-grow %s\n", grow_region(region));
    }
    const char *env = getenv("TESSERA_MEMORY_LIMIT_MIB");
    printf("probe env TESSERA_MEMORY_LIMIT_MIB=%s\n", env ? env : "");
    return 0;
}

static int hold(unsigned long long bytes)
{
    open_driver();
    use_device(0);
    if (bytes == 0) { /* a third of the limit and an odd number of bytes: the fill must end exactly there */
        size_t free = 0, total = 0;
        cu.info(&free, &total);
        bytes = total / 3 + 4097;
    }
    CUdeviceptr p;
    CUresult rc = cu.alloc(&p, (size_t)bytes);
    printf("probe hold %d %llu %s\n", (int)getpid(), bytes, err_name(rc));
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    if (rc == CUDA_SUCCESS)
        cu.release(p);
    return rc == CUDA_SUCCESS ? 0 : 1;
}

static int fill(void)
{
    int n = open_driver();
    static CUdeviceptr held[MAX_CHUNKS];
    for (int d = 0; d < n; d++)
        use_device(d); /* every device's context exists before any is measured */
    for (int d = 0; d < n; d++) {
        size_t free = 0, total = 0;
        char u[64];
        use_device(d);
        cu.info(&free, &total);
        uuid_string(d, u, sizeof u);
        unsigned long long got = 0;
        int k = 0;
        CUresult last = CUDA_SUCCESS;
        for (size_t chunk = total; chunk > 0 && k < MAX_CHUNKS;) {
            last = cu.alloc(&held[k], chunk);
            if (last == CUDA_SUCCESS) {
                got += chunk;
                k++;
            } else {
                chunk /= 2;
            }
        }
        printf("probe fill %d %s %zu %zu %llu %s\n", d, u, free, total, got, err_name(last));
        while (k > 0)
            cu.release(held[--k]);
    }
    return 0;
}

/* Runs this program with args as a child, stdout into the log (or a pipe), stdin from a pipe. */
static pid_t spawn(char *const argv[], int *to_child, int *from_child)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) || (from_child && pipe2(out, O_CLOEXEC)))
        die("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        dup2(in[0], 0);
        if (from_child)
            dup2(out[1], 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(in[0]);
    *to_child = in[1];
    if (from_child) {
        close(out[1]);
        *from_child = out[0];
    }
    return pid;
}

static int wait_for(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static int run(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int in;
    pid_t r = spawn((char *[]){"vgpu-probe", "report", NULL}, &in, NULL);
    close(in);
    if (wait_for(r) != 0)
        die("report");
    /* This process opens no context: only the two below count against the limit. */
    int hold_in, hold_out;
    pid_t h = spawn((char *[]){"vgpu-probe", "hold", NULL}, &hold_in, &hold_out);
    char line[256];
    ssize_t got = read(hold_out, line, sizeof line - 1);
    line[got > 0 ? got : 0] = '\0';
    fputs(line, stdout);
    pid_t f = spawn((char *[]){"vgpu-probe", "fill", NULL}, &in, NULL);
    close(in);
    int frc = wait_for(f);
    close(hold_in);
    int hrc = wait_for(h);
    printf("probe children fill=%d hold=%d\n", frc, hrc);
    r = spawn((char *[]){"vgpu-probe", "report", NULL}, &in, NULL);
    close(in);
    wait_for(r);
    /* One process keeps holding memory until SIGTERM, for the node agent's view of the region. */
    signal(SIGTERM, on_term);
    h = spawn((char *[]){"vgpu-probe", "hold", NULL}, &hold_in, &hold_out);
    got = read(hold_out, line, sizeof line - 1);
    line[got > 0 ? got : 0] = '\0';
    if (strncmp(line, "probe hold ", 11) == 0)
        printf("probe kept %s", line + 11);
    printf("probe done\n");
    while (!stop)
        pause();
    close(hold_in);
    wait_for(h);
    return 0;
}

/* A tenant's attack on the agent's reader: its region becomes a FIFO, which a reader that opened
 * it blocking would hang on for ever. */
static int attack(void)
{
    signal(SIGTERM, on_term);
    open_driver();
    use_device(0);
    CUdeviceptr p;
    CUresult rc = cu.alloc(&p, 1 << 20);
    const char *region = region_path();
    int err = 0;
    if (!region[0] || unlink(region) != 0 || mkfifo(region, 0666) != 0)
        err = errno ? errno : ENOENT;
    printf("probe attack fifo %s %s %s\n", region[0] ? region : "none", err ? strerrorname_np(err) : "ok", err_name(rc));
    printf("probe done\n");
    while (!stop)
        pause();
    return 0;
}

/* Cuts the container's region under a process that holds memory, then starts another: the
 * library must refuse the cut region (every call of the second child fails), not rebuild it with
 * zeroed counters and let that child allocate past the container's cap. */
static int attack_truncate(void)
{
    signal(SIGTERM, on_term);
    int hold_in, hold_out, in, out;
    pid_t h = spawn((char *[]){"vgpu-probe", "hold", NULL}, &hold_in, &hold_out);
    char first[256], second[256];
    ssize_t got = read(hold_out, first, sizeof first - 1);
    first[got > 0 ? got : 0] = '\0';
    first[strcspn(first, "\n")] = '\0';
    const char *region = region_path();
    int err = 0;
    if (!region[0] || truncate(region, 4096) != 0)
        err = errno ? errno : ENOENT;
    pid_t s = spawn((char *[]){"vgpu-probe", "hold", NULL}, &in, &out);
    close(in);
    got = read(out, second, sizeof second - 1);
    second[got > 0 ? got : 0] = '\0';
    second[strcspn(second, "\n")] = '\0';
    int src = wait_for(s);
    printf("probe attack truncate %s %s first[%s] second[%s] exit=%d\n", region[0] ? region : "none",
           err ? strerrorname_np(err) : "ok", first, second, src);
    printf("probe done\n");
    while (!stop)
        pause();
    (void)h;
    (void)hold_in;
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return run();
    if (argc >= 2 && strcmp(argv[1], "report") == 0)
        return report();
    if (argc >= 2 && strcmp(argv[1], "hold") == 0)
        return hold(argc >= 3 ? strtoull(argv[2], NULL, 10) : 0);
    if (argc >= 2 && strcmp(argv[1], "fill") == 0)
        return fill();
    if (argc >= 3 && strcmp(argv[1], "attack") == 0 && strcmp(argv[2], "truncate") == 0)
        return attack_truncate();
    if (argc == 2 && strcmp(argv[1], "attack") == 0)
        return attack();
    fprintf(stderr, "usage: vgpu-probe run|report|hold [BYTES]|fill|attack [truncate]\n");
    return 2;
}
