package tmc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// FenceArgs configure the placement lease: a Lease that a replica must hold, freshly renewed,
// at the moment it binds. kube-scheduler's own leader election picks the replica that
// schedules, but a leader paused (SIGSTOP, a stalled VM) and resumed keeps scheduling from its
// stale cache until its elector notices the lost lease; the placement lease fences its binds:
// a bind is refused unless this replica holds the lease and renewed it less than
// leaseDuration - margin ago (on this process's monotonic clock, which a pause does not stop).
// A renewal counts from when its request was sent, not from its answer: another replica acquires
// the lease only after seeing it unrenewed for leaseDuration, and it can see it renewed no
// earlier than the request was sent, so two replicas never both pass the check, even when a
// renewal's answer arrives long after the write (a replica paused while its request was out). A replica campaigns for the lease only once it is asked to
// place a pod: only the scheduling leader (and its extender) ever are.
type FenceArgs struct {
	Namespace            string `json:"namespace"`
	Name                 string `json:"name"`
	LeaseDurationSeconds *int64 `json:"leaseDurationSeconds,omitempty"`
	RenewDeadlineSeconds *int64 `json:"renewDeadlineSeconds,omitempty"`
	RetryPeriodSeconds   *int64 `json:"retryPeriodSeconds,omitempty"`
}

// Fence is a placement lease held by this process.
type Fence struct {
	elector *leaderelection.LeaderElector
	config  leaderelection.LeaderElectionConfig
	lock    *sentLock
	margin  time.Duration
	lease   string
	once    sync.Once
	ctx     context.Context
	// idle, when positive, releases the lease after this long without being asked to place a
	// pod (ReleaseWhenIdle); asked is when it last was, on the monotonic clock since start.
	idle  time.Duration
	start time.Time
	asked atomic.Int64
	wake  chan struct{}
	// identity is this replica's name in the lease; released is set from the moment an idle
	// replica gives the lease up until it acquires it again (Held refuses meanwhile).
	identity string
	released atomic.Bool
}

func secondsOr(v *int64, def int64) int64 {
	if v == nil {
		return def
	}
	return *v
}

// NewFence validates the arguments and builds the fence (it campaigns on first use).
func NewFence(ctx context.Context, client kubernetes.Interface, args *FenceArgs) (*Fence, error) {
	if args == nil {
		return nil, nil
	}
	if args.Namespace == "" || args.Name == "" || len(args.Name) > 253 || !dnsName.MatchString(args.Name) || !dnsName.MatchString(args.Namespace) {
		return nil, fmt.Errorf("placementLease: namespace and name must be DNS names, not %q/%q", clip(args.Namespace, 40), clip(args.Name, 40))
	}
	lease, renew, retry := secondsOr(args.LeaseDurationSeconds, 15), secondsOr(args.RenewDeadlineSeconds, 10), secondsOr(args.RetryPeriodSeconds, 2)
	if retry < 1 || renew <= retry || lease <= renew || lease > 300 {
		return nil, fmt.Errorf("placementLease: need 1 <= retryPeriod < renewDeadline < leaseDuration <= 300 s, not %d/%d/%d", retry, renew, lease)
	}
	host, _ := os.Hostname()
	identity := clip(host, 60) + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, args.Namespace, args.Name,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return nil, fmt.Errorf("placementLease: %w", err)
	}
	f := &Fence{lease: args.Namespace + "/" + args.Name, ctx: ctx, start: time.Now(), wake: make(chan struct{}, 1), identity: identity}
	f.lock = &sentLock{Interface: lock, identity: identity, start: f.start}
	// The margin covers the time from the check to the Binding on the wire and the clocks'
	// drift over a lease: the retry period.
	f.margin = time.Duration(retry) * time.Second
	f.config = leaderelection.LeaderElectionConfig{
		Lock:          f.lock,
		LeaseDuration: time.Duration(lease) * time.Second,
		RenewDeadline: time.Duration(renew) * time.Second,
		RetryPeriod:   time.Duration(retry) * time.Second,
		Name:          f.lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				f.released.Store(false)
				klog.InfoS("placement lease acquired", "lease", f.lease, "identity", identity)
			},
			OnStoppedLeading: func() { klog.InfoS("placement lease lost", "lease", f.lease, "identity", identity) },
		},
	}
	f.elector, err = leaderelection.NewLeaderElector(f.config)
	if err != nil {
		return nil, fmt.Errorf("placementLease: %w", err)
	}
	return f, nil
}

// ReleaseWhenIdle makes the replica give the lease up after `idle` without being asked to place
// a pod, and contend again when it next is. For a process that is not its scheduler (the
// extender beside a kube-scheduler): should the scheduler stop or lose its election while the
// extender runs on, the extender would otherwise keep renewing the lease, and the new leader's
// extender could never bind. The lease is released (not left to expire), so another pair binds
// at once. Call it before the first Campaign.
//
// The release is this package's (release), not client-go's ReleaseOnCancel: that one reads the
// lease and then clears it if the holder it last observed was itself, not the holder it just
// read, so a replica whose renewals had stalled cleared a lease another replica had acquired in
// the meantime, and both bound.
func (f *Fence) ReleaseWhenIdle(idle time.Duration) error {
	if f == nil {
		return nil
	}
	if idle <= 0 {
		return fmt.Errorf("placementLease: the idle time must be positive, not %s", idle)
	}
	f.idle = idle
	return nil
}

// release clears the lease if, as read now, this replica holds it. It is marked released
// first, so that Held refuses from before the lease is free until it is acquired again. The
// update carries the resource version just read: should another replica take the lease in
// between, the update conflicts and nothing is cleared.
func (f *Fence) release() {
	f.released.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), f.config.RenewDeadline)
	defer cancel()
	record, _, err := f.config.Lock.Get(ctx)
	if err != nil || record.HolderIdentity != f.identity {
		return
	}
	now := metav1.NewTime(time.Now())
	free := resourcelock.LeaderElectionRecord{
		LeaderTransitions:    record.LeaderTransitions,
		LeaseDurationSeconds: 1,
		AcquireTime:          now,
		RenewTime:            now,
	}
	if err := f.config.Lock.Update(ctx, free); err != nil {
		klog.InfoS("placement lease not released (another replica holds it, or the API server did not answer)", "lease", f.lease, "err", err)
		return
	}
	klog.InfoS("placement lease released: not asked to place pods", "lease", f.lease, "identity", f.identity)
}

// Campaign records that this replica is asked to place a pod and makes sure it contends for the
// lease (a lost lease is contended for again).
func (f *Fence) Campaign() {
	if f == nil {
		return
	}
	f.asked.Store(int64(time.Since(f.start)))
	select {
	case f.wake <- struct{}{}:
	default:
	}
	f.once.Do(func() { go f.contend() })
}

func (f *Fence) askedWithin(d time.Duration) bool {
	return time.Since(f.start)-time.Duration(f.asked.Load()) < d
}

func (f *Fence) contend() {
	for f.ctx.Err() == nil {
		if f.idle <= 0 {
			f.elector.Run(f.ctx)
			continue
		}
		run, cancel := context.WithCancel(f.ctx)
		go func() {
			tick := time.NewTicker(f.idle / 4)
			defer tick.Stop()
			for {
				select {
				case <-run.Done():
					return
				case <-tick.C:
					if !f.askedWithin(f.idle) {
						cancel() // release gives the lease up once the elector returns
						return
					}
				}
			}
		}()
		f.elector.Run(run)
		cancel()
		f.release()
		// Wait to be asked again (a request that came while the elector stopped counts).
		select {
		case <-f.wake:
		default:
		}
		if f.askedWithin(f.idle) {
			continue
		}
		select {
		case <-f.ctx.Done():
		case <-f.wake:
		}
	}
}

// ErrLeaseLost is what a bind refused by the fence wraps: this replica may not bind now.
var ErrLeaseLost = errors.New("the placement lease is not held")

// Held is nil when this replica may bind now: it holds the lease and renewed it recently enough
// that no other replica can have taken it.
func (f *Fence) Held() error {
	if f == nil {
		return nil
	}
	f.Campaign()
	if f.released.Load() || !f.elector.IsLeader() {
		return fmt.Errorf("tmc: this replica does not hold the placement lease %s (another replica places pods, or this one is taking over): %w", f.lease, ErrLeaseLost)
	}
	if age, ok := f.lock.sinceSent(); !ok || age > f.config.LeaseDuration-f.margin {
		return fmt.Errorf("tmc: the placement lease %s was not renewed in time (last renewal sent %s ago); this replica binds nothing until it is: %w",
			f.lease, age.Round(time.Millisecond), ErrLeaseLost)
	}
	return nil
}

// sentLock is the lease's lock, recording when the last write that made this replica the holder
// was sent. client-go's elector dates a renewal by its answer, which a process paused with the
// request out receives after the lease may have passed to another replica; the fence dates it by
// the request.
type sentLock struct {
	resourcelock.Interface
	identity string
	start    time.Time
	// sent is when the last successful holder write was sent, in nanoseconds on the monotonic
	// clock since start, plus one (zero: never).
	sent atomic.Int64
}

func (l *sentLock) Create(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	sent := time.Since(l.start)
	err := l.Interface.Create(ctx, record)
	l.written(record, sent, err)
	return err
}

func (l *sentLock) Update(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	sent := time.Since(l.start)
	err := l.Interface.Update(ctx, record)
	l.written(record, sent, err)
	return err
}

func (l *sentLock) written(record resourcelock.LeaderElectionRecord, sent time.Duration, err error) {
	if err != nil || record.HolderIdentity != l.identity {
		return
	}
	// The elector writes one request at a time; a later write never dates the lease earlier.
	for {
		last := l.sent.Load()
		if int64(sent)+1 <= last || l.sent.CompareAndSwap(last, int64(sent)+1) {
			return
		}
	}
}

// sinceSent is how long ago the last successful holder write was sent; false if none was.
func (l *sentLock) sinceSent() (time.Duration, bool) {
	sent := l.sent.Load()
	if sent == 0 {
		return 0, false
	}
	return time.Since(l.start) - time.Duration(sent-1), true
}

// BindingTransport checks the lease once more at the last moment a Binding can be stopped: as the
// request goes to the connection, after client-go's rate limiter and retry waits. The check before
// the Bind call alone left the time a request queued in the client unfenced: a replica paused
// and resumed there sent Bindings after it had lost the lease (with the client at 20 QPS, a
// burst's worth). Wrap the engine's client's transport with it (rest.Config.Wrap); every other
// request passes as it is.
func (f *Fence) BindingTransport(next http.RoundTripper) http.RoundTripper {
	if f == nil {
		return next
	}
	return &fencedTransport{fence: f, next: next}
}

type fencedTransport struct {
	fence *Fence
	next  http.RoundTripper
}

func (t *fencedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/binding") {
		if err := t.fence.Held(); err != nil {
			return nil, err
		}
	}
	return t.next.RoundTrip(r)
}
