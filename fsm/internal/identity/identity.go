// Package identity learns who the operator is, as the API server knows it,
// for the status guard of a machine's validating webhook: only the
// operator may write the fields of fsm.Status.
package identity

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// relearnAfter is how long a failure to learn the operator's identity
// stands before an admission request tries again.
const relearnAfter = 5 * time.Second

// Operators are the users that may write a machine's Status.
type Operators struct {
	machine string
	client  client.Client
	log     logr.Logger

	mu     sync.Mutex
	names  []string  // given, or learnt from the API server
	failed time.Time // when learning them last failed
	err    error     // why
}

// New returns the operators of machine: names, or, when none is given,
// the manager's own identity, which c's SelfSubjectReview tells.
func New(machine string, names []string, c client.Client, log logr.Logger) *Operators {
	return &Operators{machine: machine, names: names, client: c, log: log}
}

// Names returns the users that may write Status; or, while they are
// unknown, why.
func (o *Operators) Names(ctx context.Context) (names []string, unknown string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.names) > 0 {
		return o.names, ""
	}
	if o.err != nil && time.Since(o.failed) < relearnAfter {
		return nil, o.err.Error()
	}
	review := &authenticationv1.SelfSubjectReview{}
	err := o.client.Create(ctx, review)
	switch {
	case err != nil:
		err = fmt.Errorf("machine %s: the operator's own user name is unknown: the SelfSubjectReview failed: %w", o.machine, err)
	case review.Status.UserInfo.Username == "":
		err = fmt.Errorf("machine %s: the operator's own user name is unknown: the API server's SelfSubjectReview named nobody", o.machine)
	}
	if err != nil {
		o.failed, o.err = time.Now(), err
		o.log.Error(err, "the status guard lets every status write through until it knows the operator; set Admission.Operators to name it", "machine", o.machine)
		return nil, err.Error()
	}
	o.names, o.err = []string{review.Status.UserInfo.Username}, nil
	o.log.Info("the status guard knows the operator", "machine", o.machine, "user", o.names[0])
	return o.names, ""
}

// Start learns the operator's identity, trying again after each failure,
// until it knows it or ctx ends. Every replica serves the webhooks, the
// leader or not, so every replica learns it.
func (o *Operators) Start(ctx context.Context) error {
	for {
		if _, unknown := o.Names(ctx); unknown == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(relearnAfter):
		}
	}
}

// NeedLeaderElection says that every replica learns it.
func (*Operators) NeedLeaderElection() bool { return false }

// ChangedFields names the JSON fields in which two values differ.
func ChangedFields(old, cur any) []string {
	var a, b map[string]json.RawMessage
	oldJSON, _ := json.Marshal(old)
	curJSON, _ := json.Marshal(cur)
	_ = json.Unmarshal(oldJSON, &a)
	_ = json.Unmarshal(curJSON, &b)
	var changed []string
	for k, v := range a {
		if string(b[k]) != string(v) {
			changed = append(changed, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)
	return changed
}
