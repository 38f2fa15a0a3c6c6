"""The message: a claimed row composed into MIME, pure (addresses, headers, bodies, DKIM, Message-IDs)."""
