//! filename3 checks (RFC 1813 §2.5) for names used to create, remove or rename
//! entries.

use super::proto::NAME_MAX;
use crate::fs::access::is_dot;
use crate::fs::Status;

/// Too long → NAMETOOLONG; empty or containing '/' or NUL → INVAL.
pub fn check_name(name: &[u8]) -> Result<(), Status> {
    if name.len() > NAME_MAX {
        return Err(Status::NameTooLong);
    }
    if name.is_empty() || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(Status::Inval);
    }
    Ok(())
}

/// A name a new object is created under: "." and ".." already exist.
pub fn check_new_name(name: &[u8]) -> Result<(), Status> {
    check_name(name)?;
    if is_dot(name) {
        return Err(Status::Exist);
    }
    Ok(())
}

/// A name an object is removed or renamed from/to: "." and ".." are invalid.
pub fn check_victim_name(name: &[u8]) -> Result<(), Status> {
    check_name(name)?;
    if is_dot(name) {
        return Err(Status::Inval);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name(b"a").is_ok());
        assert!(check_name(&[b'x'; 255]).is_ok());
        assert_eq!(check_name(&[b'x'; 256]), Err(Status::NameTooLong));
        assert_eq!(check_name(b""), Err(Status::Inval));
        assert_eq!(check_name(b"a/b"), Err(Status::Inval));
        assert_eq!(check_name(b"a\0"), Err(Status::Inval));
        assert_eq!(check_new_name(b".."), Err(Status::Exist));
        assert_eq!(check_victim_name(b"."), Err(Status::Inval));
        assert!(check_victim_name(b"...").is_ok());
    }
}
