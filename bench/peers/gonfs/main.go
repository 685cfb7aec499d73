// gonfs: the go-nfs peer of `granary bench` (bench/peers/gonfs.sh builds and runs it).
//
// It serves one export over NFSv3 + MOUNT on one TCP port with go-nfs
// (github.com/willscott/go-nfs): an in-memory file system (go-nfs's helpers/memfs)
// by default (see memFS), or a host directory through go-billy's osfs with -dir. File handles
// come from go-nfs's caching handler, which keeps at most -handles of them.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	nfs "github.com/willscott/go-nfs"
	"github.com/willscott/go-nfs/helpers"
	"github.com/willscott/go-nfs/helpers/memfs"
)

// dirFS is go-billy's osfs plus billy.Change, so that SETATTR (chmod, chown,
// utimes) reaches the directory instead of failing as unsupported.
type dirFS struct {
	billy.Filesystem
	root string
}

func (d dirFS) path(name string) string { return filepath.Join(d.root, name) }

func (d dirFS) Chmod(name string, mode os.FileMode) error { return os.Chmod(d.path(name), mode) }

func (d dirFS) Lchown(name string, uid, gid int) error { return os.Lchown(d.path(name), uid, gid) }

func (d dirFS) Chown(name string, uid, gid int) error { return os.Chown(d.path(name), uid, gid) }

func (d dirFS) Chtimes(name string, atime, mtime time.Time) error {
	return os.Chtimes(d.path(name), atime, mtime)
}

// memFS is go-nfs's helpers/memfs made safe for go-nfs's concurrent handlers: its
// maps and byte slices have no locking of their own, so every call on the file system
// and on its open files takes one mutex.
//
// memfs keeps no owners, and its modes and times are fixed at creation: Chmod,
// Chown and Chtimes succeed without effect, because go-nfs fails a CREATE or MKDIR
// (NFS3ERR_IO) whose attributes it cannot apply, and the benchmark creates files.
type memFS struct {
	fs billy.Filesystem
	mu *sync.Mutex
}

func newMemFS() (*memFS, error) {
	m := &memFS{fs: memfs.New(), mu: &sync.Mutex{}}
	// memfs has no root entry until something makes one; go-nfs stats the root.
	return m, m.fs.MkdirAll("/", 0o777)
}

func locked[T any](mu *sync.Mutex, f func() (T, error)) (T, error) {
	mu.Lock()
	defer mu.Unlock()
	return f()
}

func (m *memFS) wrap(f billy.File, err error) (billy.File, error) {
	if err != nil {
		return nil, err
	}
	return &memFile{File: f, mu: m.mu}, nil
}

func (m *memFS) Create(name string) (billy.File, error) {
	return m.wrap(locked(m.mu, func() (billy.File, error) { return m.fs.Create(name) }))
}

func (m *memFS) Open(name string) (billy.File, error) {
	return m.wrap(locked(m.mu, func() (billy.File, error) { return m.fs.Open(name) }))
}

// OpenFile drops O_EXCL when O_CREATE is absent: POSIX leaves that combination to the
// implementation and memfs would refuse to open an existing file with it.
func (m *memFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if flag&os.O_CREATE == 0 {
		flag &^= os.O_EXCL
	}
	return m.wrap(locked(m.mu, func() (billy.File, error) { return m.fs.OpenFile(name, flag, perm) }))
}

func (m *memFS) Stat(name string) (os.FileInfo, error) {
	return locked(m.mu, func() (os.FileInfo, error) { return m.fs.Stat(name) })
}

func (m *memFS) Lstat(name string) (os.FileInfo, error) {
	return locked(m.mu, func() (os.FileInfo, error) { return m.fs.Lstat(name) })
}

func (m *memFS) ReadDir(name string) ([]os.FileInfo, error) {
	return locked(m.mu, func() ([]os.FileInfo, error) { return m.fs.ReadDir(name) })
}

func (m *memFS) Readlink(name string) (string, error) {
	return locked(m.mu, func() (string, error) { return m.fs.Readlink(name) })
}

func (m *memFS) TempFile(dir, prefix string) (billy.File, error) {
	return m.wrap(locked(m.mu, func() (billy.File, error) { return m.fs.TempFile(dir, prefix) }))
}

func (m *memFS) do(f func() error) error {
	_, err := locked(m.mu, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

func (m *memFS) MkdirAll(name string, perm os.FileMode) error {
	return m.do(func() error { return m.fs.MkdirAll(name, perm) })
}

func (m *memFS) Rename(from, to string) error {
	return m.do(func() error { return m.fs.Rename(from, to) })
}

func (m *memFS) Remove(name string) error { return m.do(func() error { return m.fs.Remove(name) }) }

func (m *memFS) Symlink(target, link string) error {
	return m.do(func() error { return m.fs.Symlink(target, link) })
}

func (m *memFS) Join(elem ...string) string { return m.fs.Join(elem...) }

func (m *memFS) Chroot(path string) (billy.Filesystem, error) {
	return nil, fmt.Errorf("gonfs: chroot %s: not supported by the memory file system", path)
}

func (m *memFS) Root() string { return m.fs.Root() }

func (m *memFS) Capabilities() billy.Capability { return billy.Capabilities(m.fs) }

func (m *memFS) Chmod(string, os.FileMode) error { return nil }

func (m *memFS) Lchown(string, int, int) error { return nil }

func (m *memFS) Chown(string, int, int) error { return nil }

func (m *memFS) Chtimes(string, time.Time, time.Time) error { return nil }

// memFile takes the file system's mutex around every call that touches memfs's data.
type memFile struct {
	billy.File
	mu *sync.Mutex
}

func (f *memFile) Read(p []byte) (int, error) {
	return locked(f.mu, func() (int, error) { return f.File.Read(p) })
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	return locked(f.mu, func() (int, error) { return f.File.ReadAt(p, off) })
}

func (f *memFile) Write(p []byte) (int, error) {
	return locked(f.mu, func() (int, error) { return f.File.Write(p) })
}

func (f *memFile) Seek(off int64, whence int) (int64, error) {
	return locked(f.mu, func() (int64, error) { return f.File.Seek(off, whence) })
}

func (f *memFile) Truncate(size int64) error {
	_, err := locked(f.mu, func() (struct{}, error) { return struct{}{}, f.File.Truncate(size) })
	return err
}

func (f *memFile) Close() error {
	_, err := locked(f.mu, func() (struct{}, error) { return struct{}{}, f.File.Close() })
	return err
}

func main() {
	addr := flag.String("addr", "127.0.0.1:12149", "TCP address to listen on (NFS and MOUNT)")
	dir := flag.String("dir", "", "serve this directory instead of an in-memory file system")
	handles := flag.Int("handles", 65536, "file handles go-nfs's caching handler keeps")
	flag.Parse()

	// go-nfs logs every call it has no handler for (NFSACL, which the Linux client
	// probes) at Info; LOG_LEVEL=info or debug brings that back.
	if os.Getenv("LOG_LEVEL") == "" {
		nfs.Log.SetLevel(nfs.WarnLevel)
	}

	var fs billy.Filesystem
	what := "memory"
	if *dir != "" {
		root, err := filepath.Abs(*dir)
		if err != nil {
			log.Fatalf("gonfs: -dir %s: %v", *dir, err)
		}
		if st, err := os.Stat(root); err != nil || !st.IsDir() {
			log.Fatalf("gonfs: -dir %s is not a directory", root)
		}
		fs = dirFS{Filesystem: osfs.New(root), root: root}
		what = root
	} else {
		m, err := newMemFS()
		if err != nil {
			log.Fatalf("gonfs: memory file system: %v", err)
		}
		fs = m
	}

	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("gonfs: cannot listen on %s: %v", *addr, err)
	}
	fmt.Printf("gonfs: serving %s on %s (go-nfs, %d handles)\n", what, listener.Addr(), *handles)
	handler := helpers.NewCachingHandler(helpers.NewNullAuthHandler(fs), *handles)
	log.Fatalf("gonfs: %v", nfs.Serve(listener, handler))
}
