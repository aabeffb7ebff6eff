"""Test certificates, made with the openssl command line for each test run.

make(directory) writes, with EC P-256 keys valid for a day:

  ca.pem / ca.key                 the test CA
  server.pem / server.key         signed by it, for localhost and 127.0.0.1
  client1.pem / client1.key       signed by it, CN client-one, SAN
                                  DNS:client-one.test
  client2.pem / client2.key       signed by it, CN client-two (no SAN)
  team-a.pem / team-a.key         signed by it, CN team-a-cn, SANs
                                  DNS:team-a.test and
                                  URI:spiffe://leased.test/team-a
  team-b.pem / team-b.key         signed by it, CN team-b-cn, SAN
                                  DNS:team-b.test
  quote.pem / quote.key           signed by it, CN team"q (no SAN)
  long.pem / long.key             signed by it, a 300-character URI SAN,
                                  LONG_URI
  foreign-ca.pem / foreign-ca.key another CA
  foreign.pem / foreign.key       a client signed by the foreign CA
  server2.pem / server2.key       a server certificate from the foreign CA
                                  (to rotate to)

and returns a Certs object with those paths as attributes (ca, server_key,
client1, foreign_ca, ...). Keys are mode 600.
"""
import os
import subprocess

LONG_URI = "spiffe://leased.test/" + "x" * 279


class Certs:
    def __init__(self, directory):
        self.dir = directory

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()


def _run(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _ca(name, cn, cwd):
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
         "-subj", "/CN=" + cn, "-keyout", name + ".key", "-out",
         name + ".pem", cwd=cwd)


def _leaf(name, cn, san, ca, cwd):
    _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-subj", "/CN=" + cn, "-keyout", name + ".key", "-out",
         name + ".csr", cwd=cwd)
    ext = os.path.join(cwd, name + ".ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\n")
        if san:
            f.write("subjectAltName=%s\n" % san)
    _run("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey",
         ca + ".key", "-CAcreateserial", "-days", "1", "-extfile", ext,
         "-out", name + ".pem", cwd=cwd)


def make(directory):
    os.makedirs(directory, exist_ok=True)
    _ca("ca", "leased-test-ca", directory)
    _ca("foreign-ca", "foreign-test-ca", directory)
    _leaf("server", "localhost", "DNS:localhost,IP:127.0.0.1", "ca",
          directory)
    _leaf("server2", "localhost", "DNS:localhost,IP:127.0.0.1", "foreign-ca",
          directory)
    _leaf("client1", "client-one", "DNS:client-one.test", "ca", directory)
    _leaf("client2", "client-two", None, "ca", directory)
    _leaf("team-a", "team-a-cn",
          "DNS:team-a.test,URI:spiffe://leased.test/team-a", "ca", directory)
    _leaf("team-b", "team-b-cn", "DNS:team-b.test", "ca", directory)
    _leaf("quote", 'team"q', None, "ca", directory)
    _leaf("long", "long-cn", "URI:" + LONG_URI, "ca", directory)
    _leaf("foreign", "client-foreign", "DNS:foreign.test", "foreign-ca",
          directory)
    for name in os.listdir(directory):
        if name.endswith(".key"):
            os.chmod(os.path.join(directory, name), 0o600)
    return Certs(directory)


if __name__ == "__main__":
    import sys
    make(sys.argv[1])
