package plansource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
)

// File is a plans file, watched. Changes are found by looking at the file every Interval: its
// size, modification time and inode (os.Stat follows symbolic links, so a file replaced by
// rename, or a Kubernetes ConfigMap volume whose ..data link is swapped, is seen like one edited
// in place), then its content (a change of time alone reloads nothing). Reload asks for a look
// at once (SIGHUP).
type File struct {
	// Path is the file (required).
	Path string
	// Interval is how often the file is looked at (default 500ms: a change applies within 2s).
	Interval time.Duration
	// Parse reads a plans file (default plans.Parse).
	Parse func(filename string, data []byte) (*bucket.Plans, error)

	seen  fileID
	sum   [32]byte
	force chan struct{}
}

// fileID is what tells two versions of a file apart without reading them.
type fileID struct {
	size  int64
	mtime time.Time
	ino   uint64
	dev   uint64
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino, id.dev = st.Ino, uint64(st.Dev)
	}
	return id, nil
}

func (f *File) defaults() {
	if f.Interval <= 0 {
		f.Interval = 500 * time.Millisecond
	}
	if f.Parse == nil {
		f.Parse = plans.Parse
	}
	if f.force == nil {
		f.force = make(chan struct{}, 1)
	}
}

// Load reads and parses the file now.
func (f *File) Load() (*Snapshot, error) {
	f.defaults()
	id, err := statID(f.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", plans.ErrFile, err)
	}
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", plans.ErrFile, err)
	}
	doc, err := f.Parse(f.Path, data)
	if err != nil {
		return nil, err
	}
	f.seen, f.sum = id, sha256.Sum256(data)
	return build(doc, "file "+f.Path, 0), nil
}

// settle is how long a changed file must stay unchanged before it is read.
const settle = 100 * time.Millisecond

// Reload makes the watcher read the file at once (SIGHUP); it does not block.
func (f *File) Reload() {
	f.defaults()
	select {
	case f.force <- struct{}{}:
	default:
	}
}

// Watch looks at the file until ctx ends: a new version that parses is given to apply, one that
// does not to refuse (the error names file:line and field), and the file in force stays so.
// Call Load first.
func (f *File) Watch(ctx context.Context, apply func(*Snapshot), refuse func(error)) {
	f.defaults()
	t := time.NewTicker(f.Interval)
	defer t.Stop()
	var lastErr string
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.force:
			forced = true
		}
		id, err := statID(f.Path)
		if err == nil && id == f.seen && !forced {
			continue
		}
		if err == nil && !forced {
			// Changed: let a write in progress finish (an in-place edit truncates, then writes)
			// before reading, so that a half-written file is not read and refused.
			select {
			case <-ctx.Done():
				return
			case <-time.After(settle):
			}
			if again, err2 := statID(f.Path); err2 != nil || again != id {
				continue // still changing: looked at again on the next tick
			}
		}
		var data []byte
		if err == nil {
			data, err = os.ReadFile(f.Path)
		}
		if err != nil {
			// Missing for a moment while an editor or a config tool replaces it: say so once.
			if msg := err.Error(); msg != lastErr || forced {
				lastErr = msg
				refuse(fmt.Errorf("%w: %w", plans.ErrFile, err))
			}
			continue
		}
		f.seen = id
		sum := sha256.Sum256(data)
		if bytes.Equal(sum[:], f.sum[:]) && !forced {
			continue
		}
		f.sum = sum
		doc, err := f.Parse(f.Path, data)
		if err == nil {
			lastErr = ""
			apply(build(doc, "file "+f.Path, 0))
			continue
		}
		lastErr = err.Error()
		refuse(err)
	}
}
