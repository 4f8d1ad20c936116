package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

func newKeygen() *cobra.Command {
	var out string
	var force bool
	c := &cobra.Command{
		Use:   "keygen",
		Short: "Create an ed25519 key pair for signing manifests",
		Long: `Keygen writes OUT.key (PKCS#8 PEM, mode 0600) and OUT.pub (PKIX PEM).
Keep the .key with whoever approves manifests; give the .pub to the
hosts that run agents (klock verify --key OUT.pub).`,
		Example: `  klock keygen -o ops-signing`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			priv, pub, err := policy.GenerateKey()
			if err != nil {
				return err
			}
			if err := writeNew(out+".key", priv, 0o600, force); err != nil {
				return err
			}
			if err := writeNew(out+".pub", pub, 0o644, force); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s.key (private, 0600) and %s.pub\n", out, out)
			return nil
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "klock-signing", "path prefix for the .key and .pub files")
	c.Flags().BoolVar(&force, "force", false, "overwrite existing key files")
	return c
}

func writeNew(path string, data []byte, mode os.FileMode, force bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, mode)
	if errors.Is(err, os.ErrExist) {
		return &exitError{code: exitUsage, err: fmt.Errorf("%s exists; pass --force to overwrite it", path)}
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newSign() *cobra.Command {
	var keyFile, out, maintainer, reference string
	c := &cobra.Command{
		Use:   "sign -k KEY FILE",
		Short: "Sign a manifest with an ed25519 key (writes the signature into it)",
		Long: `Sign validates FILE, then writes its signature field: ed25519 over the
RFC 8785 canonical JSON of the document without that field. The file is
rewritten in place atomically unless -o names another file (- for stdout).
YAML stays YAML, JSON stays JSON. The signature also records a short digest
of each field, so a manifest changed later is refused naming the fields
and lines that differ.

--maintainer NAME signs the maintainer approval instead: HOTL with a tool of
organizational blast radius needs hitl.maintainer_approval to be a
signature by a trusted key (free text no longer counts). It covers the
whole manifest, so any later change voids it; it drops the manifest's own
signature, which the owner then signs again:
  klock sign --maintainer payments-maintainers --reference SEC-1142 -k maint.key agent.yaml
  klock sign -k ops.key agent.yaml`,
		Example: `  klock sign -k ops-signing.key agent.yaml
  klock sign -k ops-signing.key -o - agent.yaml > signed.yaml
  klock sign --maintainer payments-maintainers -k maintainer.key agent.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := policy.Load(args[0]); err != nil {
				return &exitError{code: exitInvalid, err: fmt.Errorf("refusing to sign an invalid manifest: %w", err)}
			}
			keyData, err := os.ReadFile(keyFile)
			if err != nil {
				return &exitError{code: exitUsage, err: fmt.Errorf("read key: %w", err)}
			}
			priv, err := policy.ParsePrivateKey(keyData)
			if err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			sign := policy.Sign
			if maintainer != "" {
				sign = func(d []byte, k ed25519.PrivateKey) ([]byte, error) {
					return policy.SignApproval(d, k, maintainer, reference)
				}
			}
			signed, err := sign(data, priv)
			if err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			switch out {
			case "-":
				_, err = cmd.OutOrStdout().Write(signed)
				return err
			case "":
				out = args[0]
			}
			return atomicWrite(out, signed)
		},
	}
	c.Flags().StringVarP(&keyFile, "key", "k", "", "private key file (from klock keygen)")
	c.Flags().StringVarP(&out, "out", "o", "", "write the signed manifest here instead of in place (- for stdout)")
	c.Flags().StringVar(&maintainer, "maintainer", "", "sign hitl.maintainer_approval as this maintainer (HOTL with an organizational tool needs it) instead of the manifest")
	c.Flags().StringVar(&reference, "reference", "", "with --maintainer: the ticket or review the approval refers to")
	_ = c.MarkFlagRequired("key")
	return c
}

func atomicWrite(path string, data []byte) error {
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".klock-sign-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func newVerify() *cobra.Command {
	var keyFile string
	c := &cobra.Command{
		Use:   "verify -k PUBKEY FILE",
		Short: "Check a manifest is valid and signed by a trusted key",
		Long: `Verify validates FILE and checks its ed25519 signature against the trusted
public key. It fails when the manifest is unsigned, signed by another key,
or changed after signing (naming the fields and lines that differ).
klock run, mcp, meter and tools serve check the same at launch against
the trusted keys in /etc/klock/trust/*.pub and --trust (--require-signed).

Exit status: 0 verified, 1 invalid or not verified, 2 usage.`,
		Example: `  klock verify -k ops-signing.pub agent.yaml`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keyData, err := os.ReadFile(keyFile)
			if err != nil {
				return &exitError{code: exitUsage, err: fmt.Errorf("read key: %w", err)}
			}
			pub, err := policy.ParsePublicKey(keyData)
			if err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			m, err := policy.Load(args[0])
			if err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			if err := m.VerifySignature(pub); err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "verified %s: signed by %s\n", args[0], policy.FormatPublicKey(pub))
			return nil
		},
	}
	c.Flags().StringVarP(&keyFile, "key", "k", "", "trusted public key (PEM from klock keygen, or ed25519:<base64>)")
	_ = c.MarkFlagRequired("key")
	return c
}
