package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// WebhookServing is a loopback address and a serving certificate made for
// it, for admission webhooks that a cluster's API server calls over TLS.
type WebhookServing struct {
	certs envtest.WebhookInstallOptions
	dir   string
}

// NewWebhookServing picks a free port on 127.0.0.1 and makes a CA and a
// serving certificate for it, in a directory that Close removes, as does
// the next Start once this process is gone.
func NewWebhookServing() (*WebhookServing, error) {
	w := &WebhookServing{certs: envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}}
	if err := w.certs.PrepWithoutInstalling(); err != nil {
		return nil, fmt.Errorf("making the webhooks' serving certificate: %w", err)
	}
	dir, err := ownedDir()
	if err == nil {
		w.dir = dir
		err = adopt(&w.certs, dir)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("making the webhooks' serving certificate: %w", err), w.Close())
	}
	return w, nil
}

// adopt moves the directory of opts's serving certificate, which envtest
// makes in the temporary directory and which would stay behind a process
// killed, into dir, which removeAbandoned removes once the process is gone.
func adopt(opts *envtest.WebhookInstallOptions, dir string) error {
	certs := filepath.Join(dir, "webhook-certificates")
	if err := os.Rename(opts.LocalServingCertDir, certs); err != nil {
		return err
	}
	opts.LocalServingCertDir = certs
	return nil
}

// ServerOptions are the options of a webhook server (controller-runtime's
// webhook.NewServer) that serves at the address with the certificate.
func (w *WebhookServing) ServerOptions() webhook.Options {
	return webhook.Options{Host: w.certs.LocalServingHost, Port: w.certs.LocalServingPort, CertDir: w.certs.LocalServingCertDir}
}

// ClientConfig is how the API server reaches the webhook server: its URL,
// to which a webhook configuration adds the path, and the CA bundle.
func (w *WebhookServing) ClientConfig() admissionregistrationv1.WebhookClientConfig {
	url := "https://" + net.JoinHostPort(w.certs.LocalServingHost, strconv.Itoa(w.certs.LocalServingPort))
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: w.certs.LocalServingCAData}
}

// Install creates webhook configurations, such as fsm's
// Machine.WebhookConfigurations for ClientConfig, once srv serves: the
// configurations of kfsm fail closed, so that until then every write
// they cover, the operator's own too, would be refused. It returns when
// they are created, or when ctx ends.
func (w *WebhookServing) Install(ctx context.Context, c client.Client, srv webhook.Server, configs ...client.Object) error {
	started := srv.StartedChecker()
	for started(nil) != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, obj := range configs {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("installing the webhook configuration %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// Close removes the certificate's files.
func (w *WebhookServing) Close() error {
	err := w.certs.Cleanup()
	if w.dir != "" {
		err = errors.Join(err, os.RemoveAll(w.dir))
	}
	return err
}
