package cluster

import (
	"fmt"
	"net"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// WebhookServing is a loopback address and a serving certificate made for
// it, for admission webhooks that a cluster's API server calls over TLS.
type WebhookServing struct {
	certs envtest.WebhookInstallOptions
}

// NewWebhookServing picks a free port on 127.0.0.1 and makes a CA and a
// serving certificate for it, in a directory that Close removes.
func NewWebhookServing() (*WebhookServing, error) {
	w := &WebhookServing{certs: envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}}
	if err := w.certs.PrepWithoutInstalling(); err != nil {
		return nil, fmt.Errorf("making the webhooks' serving certificate: %w", err)
	}
	return w, nil
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

// Close removes the certificate's files.
func (w *WebhookServing) Close() error { return w.certs.Cleanup() }
