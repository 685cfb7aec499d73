/*
 * POSIX-style operations through libnfs's synchronous API (Debian libnfs-dev), against a
 * running granary. Usage: posix NFS-URL-OF-EXPORT-ROOT
 * Prints one line per check ("PASS name" / "FAIL name: detail") and exits with the number
 * of failed checks. granary's test `libnfs_posix.rs` compiles and runs it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>
#include <nfsc/libnfs.h>

static struct nfs_context *nfs;
static int failures;

static void check(int ok, const char *name, const char *fmt, long long a, long long b)
{
    if (ok) {
        printf("PASS %s\n", name);
        return;
    }
    failures++;
    printf("FAIL %s: ", name);
    printf(fmt, a, b);
    printf(" (%s)\n", nfs_get_error(nfs) ? nfs_get_error(nfs) : "");
}

/* Evaluates `got` once: it is usually the call under test. */
#define EXPECT_EQ(name, got, want)                                                  \
    do {                                                                            \
        long long got_ = (long long)(got), want_ = (long long)(want);               \
        check(got_ == want_, name, "got %lld, want %lld", got_, want_);             \
    } while (0)

static struct nfs_stat_64 st(const char *path)
{
    struct nfs_stat_64 s;
    memset(&s, 0, sizeof s);
    if (nfs_stat64(nfs, path, &s) != 0)
        s.nfs_mode = 0;
    return s;
}

static int write_at(const char *path, uint64_t off, const void *buf, size_t len)
{
    struct nfsfh *fh;
    if (nfs_open(nfs, path, O_WRONLY, &fh) != 0)
        return -1;
    int n = nfs_pwrite(nfs, fh, off, len, buf);
    nfs_close(nfs, fh);
    return n;
}

static int read_at(const char *path, uint64_t off, void *buf, size_t len)
{
    struct nfsfh *fh;
    if (nfs_open(nfs, path, O_RDONLY, &fh) != 0)
        return -1;
    int n = nfs_pread(nfs, fh, off, len, buf);
    nfs_close(nfs, fh);
    return n;
}

static void files(void)
{
    struct nfsfh *fh;
    char buf[64];
    EXPECT_EQ("mkdir", nfs_mkdir(nfs, "/d"), 0);
    EXPECT_EQ("mkdir existing is EEXIST", nfs_mkdir(nfs, "/d"), -EEXIST);
    EXPECT_EQ("creat", nfs_creat(nfs, "/d/f", 0644, &fh), 0);
    if (fh)
        nfs_close(nfs, fh);
    EXPECT_EQ("O_EXCL on existing is EEXIST", nfs_create(nfs, "/d/f", O_CREAT | O_EXCL | O_WRONLY, 0644, &fh), -EEXIST);
    EXPECT_EQ("pwrite", write_at("/d/f", 0, "hello world", 11), 11);
    EXPECT_EQ("sparse pwrite at 1 MiB", write_at("/d/f", 1 << 20, "X", 1), 1);
    EXPECT_EQ("size after sparse write", st("/d/f").nfs_size, (1 << 20) + 1);
    memset(buf, 1, sizeof buf);
    EXPECT_EQ("read inside hole", read_at("/d/f", 4096, buf, 16), 16);
    int zeros = 1;
    for (int i = 0; i < 16; i++)
        zeros &= buf[i] == 0;
    EXPECT_EQ("hole reads as zeros", zeros, 1);
    EXPECT_EQ("truncate shrink", nfs_truncate(nfs, "/d/f", 5), 0);
    EXPECT_EQ("size after shrink", st("/d/f").nfs_size, 5);
    EXPECT_EQ("truncate grow", nfs_truncate(nfs, "/d/f", 10), 0);
    memset(buf, 1, sizeof buf);
    EXPECT_EQ("read after grow", read_at("/d/f", 0, buf, 64), 10);
    EXPECT_EQ("grown tail is zeros", memcmp(buf, "hello\0\0\0\0\0", 10), 0);
}

static void names(void)
{
    char target[64] = {0};
    EXPECT_EQ("rename", nfs_rename(nfs, "/d/f", "/d/g"), 0);
    struct nfs_stat_64 s;
    EXPECT_EQ("old name gone", nfs_stat64(nfs, "/d/f", &s), -ENOENT);
    EXPECT_EQ("link", nfs_link(nfs, "/d/g", "/d/h"), 0);
    EXPECT_EQ("nlink after link", st("/d/g").nfs_nlink, 2);
    EXPECT_EQ("same inode", st("/d/g").nfs_ino, st("/d/h").nfs_ino);
    EXPECT_EQ("unlink one name", nfs_unlink(nfs, "/d/g"), 0);
    EXPECT_EQ("nlink after unlink", st("/d/h").nfs_nlink, 1);
    char buf[8] = {0};
    EXPECT_EQ("other name still reads", read_at("/d/h", 0, buf, 5), 5);
    EXPECT_EQ("content via other name", memcmp(buf, "hello", 5), 0);
    EXPECT_EQ("symlink", nfs_symlink(nfs, "some/target", "/d/s"), 0);
    EXPECT_EQ("readlink", nfs_readlink(nfs, "/d/s", target, sizeof target - 1), 0);
    EXPECT_EQ("readlink target", strcmp(target, "some/target"), 0);
    EXPECT_EQ("mknod fifo", nfs_mknod(nfs, "/d/p", S_IFIFO | 0644, 0), 0);
    EXPECT_EQ("fifo type", st("/d/p").nfs_mode & S_IFMT, S_IFIFO);
    EXPECT_EQ("mkdir sub", nfs_mkdir(nfs, "/d/sub"), 0);
    EXPECT_EQ("dir nlink counts subdir", st("/d").nfs_nlink, 3);
    struct nfsfh *fh;
    EXPECT_EQ("creat in sub", nfs_creat(nfs, "/d/sub/x", 0600, &fh), 0);
    if (fh)
        nfs_close(nfs, fh);
    EXPECT_EQ("rmdir non-empty", nfs_rmdir(nfs, "/d/sub"), -ENOTEMPTY);
    EXPECT_EQ("unlink in sub", nfs_unlink(nfs, "/d/sub/x"), 0);
    EXPECT_EQ("rmdir empty", nfs_rmdir(nfs, "/d/sub"), 0);
    EXPECT_EQ("unlink missing", nfs_unlink(nfs, "/d/nothing"), -ENOENT);
}

static void attributes(void)
{
    EXPECT_EQ("chmod", nfs_chmod(nfs, "/d/h", 0600), 0);
    EXPECT_EQ("mode after chmod", st("/d/h").nfs_mode & 07777, 0600);
    EXPECT_EQ("chown", nfs_chown(nfs, "/d/h", 1000, 1001), 0);
    EXPECT_EQ("uid after chown", st("/d/h").nfs_uid, 1000);
    EXPECT_EQ("gid after chown", st("/d/h").nfs_gid, 1001);
    struct timeval tv[2] = {{1000000000, 0}, {1000000001, 0}};
    EXPECT_EQ("utimes", nfs_utimes(nfs, "/d/h", tv), 0);
    EXPECT_EQ("atime set", st("/d/h").nfs_atime, 1000000000);
    EXPECT_EQ("mtime set", st("/d/h").nfs_mtime, 1000000001);
    EXPECT_EQ("access R_OK as root", nfs_access(nfs, "/d/h", R_OK), 0);
    struct statvfs sv;
    EXPECT_EQ("statvfs", nfs_statvfs(nfs, "/", &sv), 0);
    check(sv.f_blocks > 0 && sv.f_bfree <= sv.f_blocks, "statvfs figures", "blocks %lld free %lld",
          (long long)sv.f_blocks, (long long)sv.f_bfree);
}

static void listing(void)
{
    struct nfsdir *dir;
    struct nfsdirent *e;
    int seen = 0, h = 0, s = 0, p = 0;
    EXPECT_EQ("opendir", nfs_opendir(nfs, "/d", &dir), 0);
    if (dir == NULL)
        return;
    while ((e = nfs_readdir(nfs, dir)) != NULL) {
        seen++;
        h += strcmp(e->name, "h") == 0;
        s += strcmp(e->name, "s") == 0;
        p += strcmp(e->name, "p") == 0;
    }
    nfs_closedir(nfs, dir);
    EXPECT_EQ("listing has ., .., h, s, p", seen, 5);
    EXPECT_EQ("each name once", h + s + p, 3);
}

static void big_file(void)
{
    size_t len = 4 << 20;
    unsigned char *out = malloc(len), *in = malloc(len);
    for (size_t i = 0; i < len; i++)
        out[i] = (unsigned char)(i * 7 + i / 4096);
    struct nfsfh *fh;
    EXPECT_EQ("creat big", nfs_creat(nfs, "/big", 0644, &fh), 0);
    if (fh) {
        size_t done = 0;
        while (done < len) {
            int n = nfs_pwrite(nfs, fh, done, len - done, out + done);
            if (n <= 0)
                break;
            done += (size_t)n;
        }
        EXPECT_EQ("big written", done, len);
        EXPECT_EQ("fsync", nfs_fsync(nfs, fh), 0);
        nfs_close(nfs, fh);
    }
    size_t got = 0;
    if (nfs_open(nfs, "/big", O_RDONLY, &fh) == 0) {
        while (got < len) {
            int n = nfs_pread(nfs, fh, got, len - got, in + got);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        nfs_close(nfs, fh);
    }
    EXPECT_EQ("big read back", got, len);
    EXPECT_EQ("big content", memcmp(in, out, len), 0);
    free(out);
    free(in);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s NFS-URL\n", argv[0]);
        return 100;
    }
    nfs = nfs_init_context();
    struct nfs_url *url = nfs_parse_url_dir(nfs, argv[1]);
    if (url == NULL || nfs_mount(nfs, url->server, url->path) != 0) {
        fprintf(stderr, "mount %s failed: %s\n", argv[1], nfs_get_error(nfs));
        return 101;
    }
    files();
    names();
    attributes();
    listing();
    big_file();
    nfs_destroy_url(url);
    nfs_destroy_context(nfs);
    printf("%d failed\n", failures);
    return failures;
}
